// `ctune train RECIPE [key=value ...] [--overwrite] [--resume [CHECKPOINT]]`: the main job.
// Resolves and checks the recipe (every error before any weight is loaded), then runs the
// training session (train/run/session.h): the model, training with step checkpoints, and the result
// in output_dir (the LoRA adapter in PEFT layout, adapter/, or the full model in Hugging Face
// layout, model/), with recipe.yaml (resolved), metrics.jsonl, train.log and checkpoints/. With
// --resume it continues from the newest complete checkpoint (or the one given) exactly where
// that run stood.
//
// Several ranks: `--nproc N` starts N ranks on this machine (dist/launcher.h); a process started
// by torchrun or srun is one rank of the world its environment describes (dist/world.h).
#include <filesystem>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/recipe.h"
#include "distributed/comm.h"
#include "distributed/launcher.h"
#include "train/run/session.h"

namespace ctune::cli {

namespace {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  train::SessionOptions session;
  int nproc = 0;  // 0: as the environment says (one process unless launched as a rank)
};

// How long the launcher lets the other ranks exit by themselves after one failed (they notice
// within seconds: a dead peer closes its connections).
constexpr std::chrono::seconds kLauncherGrace{5};

int run_train(TrainOptions o) {
  // `--resume key=value` is an override after a bare --resume, not a checkpoint path.
  const std::string from = o.session.resume_from.string();
  if (is_override_in_path_slot(from)) {
    o.overrides.push_back(from);
    o.session.resume_from.clear();
  }
  const distributed::World world = distributed::world_from_env();
  if (o.nproc > 1 && !world.from_environment) {
    (void)Recipe::load(o.recipe, o.overrides);  // a bad recipe fails once, here, not once per rank
    return distributed::launch_local(o.nproc, kLauncherGrace);
  }
  if (o.nproc > 0 && o.nproc != world.size) {
    throw ConfigError("--nproc " + std::to_string(o.nproc) + " disagrees with the world of " + std::to_string(world.size) +
                      " ranks that " + world.source + " describe");
  }
  // Join the other ranks before planning, so that a rank whose planning fails tells them at once.
  Recipe recipe = Recipe::load(o.recipe, o.overrides);
  distributed::Comm comm(world, train::distributed_timeout(recipe));
  train::Session(train::plan_run(std::move(recipe), world), o.session, comm).run();
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
  cmd->add_option("--nproc", opts->nproc,
                  "Train with N ranks on this machine (data parallel over Gloo); under torchrun or srun, leave it out")
      ->check(CLI::Range(1, 1024));
  cmd->callback([opts, resume_from, cmd, &run] {
    opts->session.resume = cmd->count("--resume") > 0;
    opts->session.resume_from = *resume_from;
    run = [opts] { return run_train(*opts); };
  });
  return cmd;
}

}  // namespace ctune::cli
