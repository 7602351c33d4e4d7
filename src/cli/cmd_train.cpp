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
#include "cli/fit.h"
#include "cli/parse.h"
#include "core/recipe.h"
#include "core/recipe_schema.h"
#include "io/run_layout.h"
#include "distributed/comm.h"
#include "distributed/launcher.h"
#include "ops/device.h"
#include "ops/memory.h"
#include "ops/tensor_pool.h"
#include "train/run/session.h"

namespace ctune::cli {

namespace fs = std::filesystem;

namespace {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  train::SessionOptions session;
  std::string fit;  // --fit SIZE: keys set to auto planned for this budget first (cli/fit.h)
  int nproc = 0;  // 0: as the environment says (one process unless launched as a rank)
};

// How long the launcher lets the other ranks exit by themselves after one failed (they notice
// within seconds: a dead peer closes its connections).
constexpr std::chrono::seconds kLauncherGrace{5};

// A run planned with --fit resumes with the values it was planned with (its resolved recipe in
// output_dir), not with a new plan, which another machine's rates could change.
Recipe planned_values_of_run(const Recipe& recipe) {
  std::vector<std::string> overrides;
  for (const auto& spec : recipe_schema()) {
    if (!spec.planned || !recipe.is_auto(spec.key)) continue;
    if (recipe.is_null("output_dir")) break;
    const fs::path saved_file = fs::path(recipe.get_string("output_dir")) / io::kRecipeFile;
    if (!fs::exists(saved_file)) break;
    const Recipe saved = Recipe::load(saved_file);
    overrides.push_back(spec.key + "=" + saved.value_text(spec.key));
    if (spec.key == "training.batch_size") overrides.push_back("training.grad_accum=" + saved.value_text("training.grad_accum"));
  }
  return overrides.empty() ? recipe : recipe.with(overrides);
}

int run_train(TrainOptions o) {
  // `--resume key=value` is an override after a bare --resume, not a checkpoint path.
  const std::string from = o.session.resume_from.string();
  if (is_override_in_path_slot(from)) {
    o.overrides.push_back(from);
    o.session.resume_from.clear();
  }
  const distributed::World world = distributed::world_from_env();
  if (o.nproc > 1 && !world.from_environment) {
    const Recipe recipe = Recipe::load(o.recipe, o.overrides);  // a bad recipe fails once, here, not once per rank
    if (!o.fit.empty()) {
      // Planned (and printed) once here, which also caches the machine's rates: each rank then
      // plans the same from the cache, quietly.
      (void)plan_for_budget(recipe, planned_world(o.nproc, 1), o.fit, false);
    }
    return distributed::launch_local(o.nproc, kLauncherGrace);
  }
  if (o.nproc > 0 && o.nproc != world.size) {
    throw ConfigError("--nproc " + std::to_string(o.nproc) + " disagrees with the world of " + std::to_string(world.size) +
                      " ranks that " + world.source + " describe");
  }
  // Join the other ranks before planning, so that a rank whose planning fails tells them at once.
  Recipe recipe = Recipe::load(o.recipe, o.overrides);
  if (o.session.resume && o.fit.empty()) recipe = planned_values_of_run(recipe);
  if (!o.fit.empty()) recipe = plan_for_budget(recipe, world, o.fit, world.from_environment).resolved;
  distributed::Comm comm(world, train::distributed_timeout(recipe));
  try {
    train::Session(train::plan_run(recipe, world), o.session, comm).run();
  } catch (const train::OutOfMemory& oom) {
    // The run's memory is gone with it; planning measures and allocates, past any limit.
    ops::set_memory_limit(ops::parse_device(recipe.get_string("device")), 0);
    ops::release_free_memory();
    std::string advice;
    try {
      advice = plan_after_out_of_memory(recipe, world, oom);
    } catch (const Error& e) {
      advice = std::string("; no plan could be made (") + e.what() + ")";
    }
    throw train::OutOfMemory(oom.facts(), advice);
  }
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
  cmd->add_option("--fit", opts->fit,
                  "Plan the keys set to auto for this memory budget per device (24GB, 800MB) as `ctune plan` does, then train");
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
