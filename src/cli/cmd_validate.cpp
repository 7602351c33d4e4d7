// `ctune validate RECIPE [key=value ...]`: every check `train` makes before loading weights
// (types, ranges, files, model/tokenizer/LoRA/data rules); prints the resolved recipe and
// what the run would do.
#include <iostream>

#include "cli/commands.h"
#include "core/recipe.h"
#include "train/run/run_plan.h"

namespace ctune::cli {

namespace {

struct ValidateOptions {
  std::string recipe;
  std::vector<std::string> overrides;
};

int run_validate(const ValidateOptions& o) {
  auto plan = train::plan_run(Recipe::load(o.recipe, o.overrides));
  std::cout << "# resolved recipe (" << o.recipe << ")\n" << plan.recipe_yaml() << "\n# plan\n";
  std::string summary = plan.summary();
  for (std::size_t pos = 0, end; (end = summary.find('\n', pos)) != std::string::npos; pos = end + 1) {
    std::cout << "# " << summary.substr(pos, end - pos) << "\n";
  }
  std::cout << "# ok" << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_validate_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<ValidateOptions>();
  auto* cmd = app.add_subcommand("validate", "Check a recipe (and its model, tokenizer and data) without training");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML)")->required();
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides");
  cmd->callback([opts, &run] { run = [opts] { return run_validate(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
