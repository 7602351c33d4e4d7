// `ctune estimate RECIPE [key=value ...] [--json]`: the memory ledger of the run the recipe
// describes, line by line with the formula behind each line, before any weight is loaded.
// `ctune train` logs the same prediction next to the measured peak.
// `ctune estimate --generate --model DIR [--batch B] [--num-beams K] [--prompt-tokens P] [--max-new-tokens N]`:
// the generation view (weights, KV cache, the prompt pass), from config.json and the checkpoint
// headers; `ctune generate --json` reports the measured peak.
#include <iostream>

#include "cli/commands.h"
#include "cli/fit.h"
#include "core/error.h"
#include "core/recipe.h"
#include "distributed/world.h"
#include "model/config.h"
#include "model/parameter_shapes.h"
#include "model/decoder.h"
#include "ops/memory.h"
#include "train/forecast/memory_ledger.h"
#include "train/run/run_plan.h"

namespace ctune::cli {

namespace {

struct EstimateOptions {
  std::string recipe, model_dir, dtype;
  bool generate = false;
  std::int64_t batch = 1, prompt_tokens = 512, new_tokens = 256, num_beams = 1;
  std::vector<std::string> overrides;
  bool json = false;
  int nproc = 1;
  int nodes = 1;
};

int run_generation_estimate(const EstimateOptions& o) {
  if (o.model_dir.empty()) throw ConfigError("--generate needs --model DIR");
  train::GenerationLedgerInputs in;
  in.config = model::load_model_config(o.model_dir);
  in.parameters = model::parameter_count(model::parameter_shapes(in.config));
  in.storage_dtype = model::parse_dtype(o.dtype.empty() ? "fp32" : o.dtype, "--dtype");
  in.batch = o.batch * o.num_beams;  // beam search keeps num_beams rows (and caches) per prompt
  in.prompt_tokens = o.prompt_tokens;
  in.new_tokens = o.new_tokens;
  in.threads = at::get_num_threads();  // generate runs on this process's threads
  const auto ledger = train::estimate_generation_memory(in);
  if (o.json) {
    std::cout << ledger.to_json().dump() << std::endl;
  } else {
    std::cout << "memory ledger of ctune generate for " << o.model_dir << "\n" << ledger.to_text();
  }
  return 0;
}

int run_estimate(const EstimateOptions& o) {
  if (o.generate) return run_generation_estimate(o);
  if (o.recipe.empty()) throw ConfigError("give a recipe, or --generate --model DIR for the generation view");
  const distributed::World world = planned_world(o.nproc, o.nodes);  // N ranks over K nodes of N/K each
  const auto plan = train::plan_run(Recipe::load(o.recipe, o.overrides), world, train::PlanScope::shapes);
  const auto ledger = train::estimate_memory(train::ledger_inputs(plan, ops::memory_now(plan.device)));
  // And on disk: what its checkpoints and result take (docs/planning.md, "Running out of disk").
  const train::RunWrites writes = train::run_writes(plan, ledger);
  const train::DiskNeed disk = train::disk_need(writes, train::checkpoint_schedule(plan));
  if (o.json) {
    Json j = ledger.to_json();
    j["disk"] = {{"checkpoint_bytes", writes.checkpoint}, {"result_bytes", writes.result}, {"peak_bytes", disk.bytes},
                 {"checkpoints_at_once", disk.at_once}, {"peak_moment", disk.moment}};
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << "memory ledger per rank for " << o.recipe;
    if (o.nproc > 1) {
      std::cout << " on " << o.nproc << " ranks" << (o.nodes > 1 ? " in " + std::to_string(o.nodes) + " nodes" : "") << " ("
                << plan.distributed.strategy << (plan.distributed.cpu_offload ? ", CPU offload" : "") << ")";
    }
    std::cout << "\n" << ledger.to_text();
    std::cout << "disk             " << train::describe(writes, disk) << ", when " << disk.moment << "\n";
  }
  return 0;
}

}  // namespace

CLI::App* add_estimate_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand("estimate", "Predict a run's memory, line by line, before anything is allocated");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML)");
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides");
  cmd->add_flag("--json", opts->json, "Print the ledger as one JSON object");
  cmd->add_option("--nproc", opts->nproc, "Per-rank figures for a run on N ranks (distributed.strategy decides what divides)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--nodes", opts->nodes, "...spread over K nodes (hybrid_shard shards within a node)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--generate", opts->generate, "The generation view: weights, KV cache and prompt pass of ctune generate");
  cmd->add_option("--model", opts->model_dir, "--generate: the model directory");
  cmd->add_option("--dtype", opts->dtype, "--generate: the dtype generate loads and computes in (default fp32)");
  cmd->add_option("--batch", opts->batch, "--generate: prompts generated together")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--num-beams", opts->num_beams, "--generate: beams per prompt (beam search)")->check(CLI::Range(1, 1 << 10));
  cmd->add_option("--prompt-tokens", opts->prompt_tokens, "--generate: tokens of the longest prompt")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-new-tokens", opts->new_tokens, "--generate: tokens generated at most")->check(CLI::Range(1, 1 << 24));
  cmd->callback([opts, &run] { run = [opts] { return run_estimate(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
