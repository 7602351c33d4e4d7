// `ctune train RECIPE [key=value ...] [--overwrite] [--resume [CHECKPOINT]]`: the main job.
// Resolves and checks the recipe (every error before any weight is loaded), then runs the
// training session (train/session.h): the model, training with step checkpoints, and the result
// in output_dir (the LoRA adapter in PEFT layout, adapter/, or the full model in Hugging Face
// layout, model/), with recipe.yaml (resolved), metrics.jsonl, train.log and checkpoints/. With
// --resume it continues from the newest complete checkpoint (or the one given) exactly where
// that run stood.
#include <filesystem>

#include "cli/commands.h"
#include "core/recipe.h"
#include "train/session.h"

namespace ctune::cli {

namespace {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  train::SessionOptions session;
};

int run_train(TrainOptions o) {
  // `--resume key=value` is an override after a bare --resume, not a checkpoint path.
  const std::string& from = o.session.resume_from.string();
  std::error_code ec;
  if (from.find('=') != std::string::npos && !std::filesystem::exists(from, ec)) {
    o.overrides.push_back(from);
    o.session.resume_from.clear();
  }
  train::Session(train::plan_run(Recipe::load(o.recipe, o.overrides)), o.session).run();
  return 0;
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<TrainOptions>();
  auto resume_from = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("train", "Fine-tune a model as a YAML recipe says (full or LoRA)");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML)")->required();
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides, e.g. optimizer.lr=1e-4");
  auto* overwrite =
      cmd->add_flag("--overwrite", opts->session.overwrite, "Replace the results of an earlier run in output_dir");
  auto* resume = cmd->add_option("--resume", *resume_from,
                                 "Continue the run in output_dir from its newest complete checkpoint, or from CHECKPOINT")
                     ->expected(0, 1);
  resume->excludes(overwrite);
  cmd->add_flag("--inputs-moved", opts->session.inputs_moved,
                "With --resume: accept inputs (model, tokenizer, data) found at other paths than the checkpoint recorded, "
                "when their content is the same");
  cmd->callback([opts, resume_from, cmd, &run] {
    opts->session.resume = cmd->count("--resume") > 0;
    opts->session.resume_from = *resume_from;
    run = [opts] { return run_train(*opts); };
  });
  return cmd;
}

}  // namespace ctune::cli
