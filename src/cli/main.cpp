// ctune: one binary, one subcommand per user journey. Errors from every layer are caught
// here and printed as one line on stderr with a non-zero exit.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/stop_signal.h"
#include "core/threads.h"
#include "model/family.h"
#include "ops/memory_phase.h"
#include "ops/threads.h"

namespace {

// Library messages are one line by construction; c10 messages may carry a backtrace.
std::string first_line(const std::string& text) {
  auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

// The one error line on stderr; a training run also keeps it at the end of its train.log.
int fail(const std::string& kind, const std::string& message, int status = 1) {
  const std::string line = "ctune: " + kind + ": " + first_line(message);
  ctune::print_line(line);  // above a live progress line, if one is still drawn
  if (auto log = spdlog::get("train")) {
    log->error("{}", line);
    log->flush();
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string families;  // the registry's, so the help never lags a new family
  for (const auto* f : ctune::model::all_families()) families += (families.empty() ? "" : ", ") + f->name;
  CLI::App app{"ctune: fine-tune, score and export Hugging Face causal language models (model_type " + families + ")"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  std::string threads = "auto";
  std::string log_level = "info";
  // Global options may be repeated (scripts append overrides): the last one wins.
  app.add_option("--threads", threads, "Intra-op threads: a count or \"auto\" (the cores available)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (logs go to stderr)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  ctune::cli::Action run;
  ctune::cli::add_train_command(app, run);
  ctune::cli::add_validate_command(app, run);
  ctune::cli::add_eval_command(app, run);
  ctune::cli::add_generate_command(app, run);
  ctune::cli::add_merge_command(app, run);
  ctune::cli::add_consolidate_command(app, run);
  ctune::cli::add_estimate_command(app, run);
  ctune::cli::add_plan_command(app, run);
  ctune::cli::add_init_command(app, run);
  ctune::cli::add_score_command(app, run);
  ctune::cli::add_tokenize_command(app, run);
  ctune::cli::add_render_command(app, run);
  ctune::cli::add_info_command(app, run);
  ctune::cli::add_export_command(app, run);
  ctune::cli::add_report_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ctune: usage error: " << first_line(e.what()) << " (see ctune --help)" << std::endl;
    return 2;
  }
  try {
    ctune::init_logging(log_level);
    ctune::ops::use_threads(ctune::parse_thread_count(threads, "--threads"));
    return run();
  } catch (const ctune::StoppedError& e) {
    return fail(e.kind(), e.what(), e.status());
  } catch (const ctune::Error& e) {
    return fail(e.kind(), e.what());
  } catch (const c10::Error& e) {
    return fail("error", e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    // An allocation the checks before it did not foresee (a library's own, under ulimit -v).
    const std::string when = ctune::ops::memory_phase_known() ? " (" + ctune::ops::memory_phase_text() + ")" : "";
    return fail("out of memory", "an allocation failed" + when + ": past what the process can hold (docs/planning.md)");
  } catch (const std::exception& e) {
    return fail("error", e.what());
  }
}
