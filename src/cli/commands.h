// Subcommands of the `ctune` binary. Each add_* registers its options on `app` and returns
// the subcommand; when the subcommand is chosen, main() calls the function stored in `run`.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ctune::cli {

using Action = std::function<int()>;

CLI::App* add_init_command(CLI::App& app, Action& run);
CLI::App* add_score_command(CLI::App& app, Action& run);
CLI::App* add_tokenize_command(CLI::App& app, Action& run);
CLI::App* add_render_command(CLI::App& app, Action& run);
CLI::App* add_info_command(CLI::App& app, Action& run);
CLI::App* add_train_command(CLI::App& app, Action& run);
CLI::App* add_validate_command(CLI::App& app, Action& run);
CLI::App* add_eval_command(CLI::App& app, Action& run);
CLI::App* add_report_command(CLI::App& app, Action& run);
CLI::App* add_generate_command(CLI::App& app, Action& run);
CLI::App* add_merge_command(CLI::App& app, Action& run);
CLI::App* add_estimate_command(CLI::App& app, Action& run);
CLI::App* add_plan_command(CLI::App& app, Action& run);
CLI::App* add_export_command(CLI::App& app, Action& run);
CLI::App* add_consolidate_command(CLI::App& app, Action& run);

}  // namespace ctune::cli
