// `ctune validate RECIPE [key=value ...]`: every check `train` makes before loading weights
// (types, ranges, files, model/tokenizer/LoRA/data rules); prints the resolved recipe and
// what the run would do, then the first training example as the model will see it (chat and
// instruct records: the chat format's text, with the trained part counted).
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/recipe.h"
#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/records.h"
#include "tokenizer/load.h"
#include "train/run/run_plan.h"

namespace ctune::cli {

namespace {

struct ValidateOptions {
  std::string recipe;
  std::vector<std::string> overrides;
};

// "# " before every line of `text`.
void print_commented(const std::string& text) {
  std::size_t pos = 0;
  for (std::size_t end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1)
    std::cout << "#   " << text.substr(pos, end - pos) << "\n";
  if (pos < text.size()) std::cout << "#   " << text.substr(pos) << "\n";
}

void print_first_example(const train::RunPlan& plan) {
  const data::DataOptions& d = plan.data;
  if (d.format == data::DataFormat::text) return;
  const auto tokenizer = tok::load_tokenizer(plan.tokenizer_dir);
  const data::RecordFormatter formatter(d, *tokenizer, data::read_chat_template(d.tokenizer_dir));
  data::RecordReader reader(d.train);
  data::Record rec;
  try {
    if (!reader.next(rec)) return;
  } catch (const FormatError& e) {  // a line data.on_error: skip drops unread (longer than a record may be)
    std::cout << "# first example: not read (" << e.what() << ")\n";
    return;
  }
  data::Rendered r;
  try {
    r = formatter.render(rec.value, rec.where);
  } catch (const FormatError& e) {  // a record data.on_error: skip drops (the plan has counted it)
    std::cout << "# first example: not rendered (" << e.what() << ")\n";
    return;
  }
  const auto built = data::ExampleBuilder(*tokenizer, d.train_on_input, d.max_seq_len).build(r);
  std::size_t trained = 0;
  for (const auto l : built.example.labels) trained += l != data::kIgnoreIndex;
  std::cout << "# first example (" << rec.where << "), as the model sees it; `ctune render` shows which tokens train:\n";
  print_commented(r.str());
  std::cout << "# " << built.example.ids.size() << " tokens, " << trained << " trained\n";
}

int run_validate(const ValidateOptions& o) {
  auto plan = train::plan_run(Recipe::load(o.recipe, o.overrides));
  std::cout << "# resolved recipe (" << o.recipe << ")\n" << plan.recipe_yaml() << "\n# plan\n";
  std::string summary = plan.summary();
  for (std::size_t pos = 0, end; (end = summary.find('\n', pos)) != std::string::npos; pos = end + 1) {
    std::cout << "# " << summary.substr(pos, end - pos) << "\n";
  }
  print_first_example(plan);
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
