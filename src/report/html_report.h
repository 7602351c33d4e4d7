// `ctune report`: one self-contained HTML page per run (docs/report.md): a header with what ran
// and how it ended, inline SVG plots of every metrics.jsonl series against step (several runs
// overlaid with --compare), the memory ledger and the resolved recipe. No scripts, fonts or
// images from outside; the log-scale switch is pure CSS.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "report/run_data.h"

namespace ctune::report {

// The page for `run`, with `others` overlaid on its plots.
std::string render_report(const RunData& run, const std::vector<RunData>& others = {});

// Reads the runs and writes the page to `out` atomically (default: run_dir/report.html).
void write_report(const std::filesystem::path& run_dir, std::filesystem::path out = {},
                  const std::vector<std::filesystem::path>& compare = {});

}  // namespace ctune::report
