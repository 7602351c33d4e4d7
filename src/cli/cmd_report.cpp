// `ctune report RUN_DIR [--out FILE.html] [--compare RUN_DIR2 ...]`: the run as one
// self-contained HTML page (report/html_report.h). `train` writes RUN_DIR/report.html itself at
// each checkpoint and at the end; this command writes it for any run, at any time, and overlays
// other runs.
#include <iostream>

#include "cli/commands.h"
#include "io/run_layout.h"
#include "report/html_report.h"

namespace ctune::cli {

namespace {
struct ReportOptions {
  std::string run_dir, out;
  std::vector<std::string> compare;
};
}  // namespace

CLI::App* add_report_command(CLI::App& app, Action& run) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand("report", "Write a run's HTML report: curves, memory ledger, recipe (RUN_DIR/report.html)");
  cmd->add_option("run_dir", o->run_dir, "Run directory (output_dir of a train run)")->required();
  cmd->add_option("--out", o->out, "Where to write the page (default: RUN_DIR/report.html)");
  cmd->add_option("--compare", o->compare, "Other run directories to overlay on the plots");
  cmd->callback([o, &run] {
    run = [o] {
      std::vector<std::filesystem::path> compare(o->compare.begin(), o->compare.end());
      const std::filesystem::path out = o->out.empty() ? std::filesystem::path(o->run_dir) / io::kReportFile : std::filesystem::path(o->out);
      report::write_report(o->run_dir, out, compare);
      std::cout << out.string() << std::endl;
      return 0;
    };
  });
  return cmd;
}

}  // namespace ctune::cli
