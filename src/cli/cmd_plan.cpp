// `ctune plan RECIPE --budget SIZE [--nproc N] [--nodes K] [--measure] [--write OUT.yaml]`: the
// run's techniques chosen for a memory budget per device (train/plan/planner.h,
// docs/planning.md). Keys the recipe sets are kept; keys set to `auto` are searched. Prints the
// candidates (predicted peak per device, predicted tokens/s, whether each fits), the chosen plan
// and the ledger lines each of its switches moved. --measure trains the best few candidates for
// two steps and prints predicted against measured; --write writes the resolved recipe (a new
// file, or with --overwrite a regular one that is no input: io/run_dir.h).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/fit.h"
#include "core/error.h"
#include "core/json.h"
#include "core/random_hex.h"
#include "core/recipe_schema.h"
#include "core/threads.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/run_dir.h"
#include "io/run_layout.h"
#include "train/run/run_plan.h"

namespace ctune::cli {

namespace fs = std::filesystem;

namespace {

constexpr int kMeasured = 3;  // --measure: the fastest candidates that fit

struct PlanOptions {
  std::string recipe, budget, write;
  std::vector<std::string> overrides;
  int nproc = 1, nodes = 1;
  bool measure = false, remeasure = false, json = false, overwrite = false;
};

struct Measured {
  bool ok = false;
  std::int64_t peak = 0;
  double tokens_per_s = 0;
};

// Two steps of `recipe` trained by this binary in a scratch directory; the peak and the last
// step's tokens/s from its metrics.jsonl.
Measured measure_two_steps(const Recipe& recipe, int nproc, const fs::path& dir) {
  fs::create_directories(dir);
  const Recipe run = recipe.with(
                                   {"output_dir=" + (dir / "run").string(), "training.max_steps=2", "training.epochs=null",
                                    "training.eval_every=0", "scheduler.warmup_steps=0", "checkpoint.every_n_steps=0",
                                    "logging.tensorboard=false"});
  const fs::path file = dir / io::kRecipeFile;
  io::write_file_atomic(file, run.to_yaml());
  std::vector<std::string> args = {"/proc/self/exe", "train", file.string(), "--overwrite"};
  if (nproc > 1) args.insert(args.end(), {"--nproc", std::to_string(nproc)});
  const fs::path log = dir / "train.out";
  std::cout.flush();  // the child must not inherit (and print again) what is buffered
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out) ::dup2(::fileno(stdout), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  Measured m;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("tokens_per_s") || !j.contains("peak_mem_bytes")) continue;
    m.peak = std::max<std::int64_t>(m.peak, j["peak_mem_bytes"].get<std::int64_t>());
    if (j["tokens_per_s"].is_number()) m.tokens_per_s = j["tokens_per_s"].get<double>();
    m.ok = true;
  }
  return m;
}

int run_plan(const PlanOptions& o) {
  const auto world = planned_world(o.nproc, o.nodes);
  const Recipe recipe = Recipe::load(o.recipe, o.overrides);
  if (!o.write.empty()) {
    // As every writer: a regular file or nothing, never an input, --overwrite to replace;
    // refused before the search (seconds, with --measure minutes) is spent.
    io::NamedPaths inputs = train::recipe_inputs(recipe);
    inputs.emplace_back("RECIPE", o.recipe);
    io::refuse_unsafe_output_file(o.write, "--write", inputs, o.overwrite);
  }
  const auto plan = plan_for_budget(recipe, world, o.budget, false, o.remeasure, o.json);
  if (o.json) return plan.chosen ? 0 : 1;
  if (o.measure) {
    const fs::path scratch = fs::temp_directory_path() / ("ctune-plan-" + random_hex(6));
    std::cout << "\nmeasured (two steps each, " << scratch.string() << "):\n";
    std::cout << "    candidate                                              peak MB pred / meas     tokens/s pred / meas\n";
    int shown = 0;
    for (std::size_t i = 0; i < plan.candidates.size() && shown < kMeasured; ++i) {
      const auto& c = plan.candidates[i];
      if (!c.fits) continue;
      std::vector<std::string> overrides;
      for (const auto& ov : c.techniques.overrides()) {
        const std::string key = ov.substr(0, ov.find('='));
        if (recipe.is_auto(key) || (key == "training.grad_accum" && recipe.is_auto("training.batch_size"))) overrides.push_back(ov);
      }
      const Recipe r = recipe.with(overrides);
      const Measured m = measure_two_steps(r, o.nproc, scratch / std::to_string(i));
      const std::string name = train::describe_techniques(c.techniques, plan.auto_keys);
      char row[256];
      if (m.ok) {
        std::snprintf(row, sizeof row, "%s %-54s %9.1f / %-9.1f %9.0f / %-9.0f\n", plan.chosen && *plan.chosen == i ? "->" : "  ",
                      name.c_str(), static_cast<double>(c.ledger.peak_bytes) / 1e6, static_cast<double>(m.peak) / 1e6,
                      c.time.tokens_per_second(), m.tokens_per_s);
      } else {
        std::snprintf(row, sizeof row, "   %-54s failed: see %s\n", name.c_str(), (scratch / std::to_string(i) / "train.out").c_str());
      }
      std::cout << row << std::flush;
      ++shown;
    }
    std::error_code ec;
    fs::remove_all(scratch, ec);
  }
  if (!o.write.empty()) {
    io::write_file_atomic(o.write, plan.resolved.to_yaml());
    std::cout << "\nwrote the resolved recipe to " << o.write << "\n";
  }
  return 0;
}

}  // namespace

distributed::World planned_world(int nproc, int nodes) {
  if (nproc % nodes != 0)
    throw ConfigError("--nodes " + std::to_string(nodes) + " does not divide --nproc " + std::to_string(nproc) + " (ranks per node must be equal)");
  distributed::World world;
  world.size = nproc;
  world.local_size = nproc / nodes;
  return world;
}

train::PlanResult plan_for_budget(const Recipe& recipe, const distributed::World& world, const std::string& budget, bool quiet,
                                  bool remeasure, bool json) {
  const auto bytes = static_cast<std::int64_t>(io::parse_byte_size(budget, "--budget"));
  const bool cuda = recipe.get_string("device") == "cuda";
  const int threads = parse_thread_count(recipe.get_string("threads"), "threads");
  auto plan = train::plan_techniques(recipe, world, bytes, [&] {
    return train::machine_rates(cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU), threads, remeasure);
  });
  if (json) {
    std::cout << plan.to_json().dump() << std::endl;
    return plan;
  }
  if (!plan.chosen) throw ConfigError(plan.nothing_fits);  // the one line, nothing else
  if (!quiet) std::cout << plan.table() << "\n" << plan.explanation() << std::flush;
  return plan;
}

std::string plan_after_out_of_memory(const Recipe& recipe, const distributed::World& world, const train::OutOfMemory& oom) {
  std::vector<std::string> keys = {"memory.activation_checkpointing", "memory.chunked_loss"};
  if (recipe.get_string("peft.method") == "lora") keys.push_back("memory.quantize_base");
  if (world.size > 1) keys.insert(keys.end(), {"distributed.strategy", "distributed.cpu_offload"});
  std::vector<std::string> overrides;
  for (const auto& key : keys) overrides.push_back(key + "=" + kAutoValue);
  if (recipe.is_null("training.global_batch_size")) {
    const auto global = recipe.get_int("training.batch_size") * recipe.get_int("training.grad_accum") * world.size;
    overrides.push_back("training.global_batch_size=" + std::to_string(global));
  }
  overrides.push_back("training.batch_size=auto");
  const Recipe r = recipe.with_defaults({"training.grad_accum"}).with(overrides);

  const bool cuda = recipe.get_string("device") == "cuda";
  const int threads = parse_thread_count(recipe.get_string("threads"), "threads");
  const auto& f = oom.facts();
  const auto plan = train::plan_techniques(
      r, world, oom.budget(), [&] { return train::machine_rates(cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU), threads, false); },
      f.runtime > 0 ? std::optional<std::int64_t>(f.runtime) : std::nullopt);
  const std::string budget = train::format_mb(oom.budget());
  if (!plan.chosen) return "; with precision and method kept, " + plan.nothing_fits;
  const auto& chosen = plan.candidates[*plan.chosen];
  std::string changed;
  for (const auto& ov : chosen.techniques.overrides()) {
    const std::string key = ov.substr(0, ov.find('='));
    if (recipe.with({ov}).value_text(key) != recipe.value_text(key)) changed += (changed.empty() ? "" : " ") + ov;
  }
  if (changed.empty()) {
    return "; the ledger expected this run to fit " + budget + ", so it under-predicted here (please report it with train.log)";
  }
  return "; a plan that fits " + budget + " (predicted peak " + train::format_mb(chosen.ledger.peak_bytes) + "): " + changed;
}

CLI::App* add_plan_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "Choose a run's memory and speed techniques (keys set to auto) for a memory budget");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML)")->required();
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides");
  cmd->add_option("--budget", opts->budget, "Memory per device: 24GB, 16GiB, 800MB")->required();
  cmd->add_option("--nproc", opts->nproc, "Ranks the run will have")->check(CLI::Range(1, 1024));
  cmd->add_option("--nodes", opts->nodes, "...spread over K nodes")->check(CLI::Range(1, 1024));
  cmd->add_flag("--measure", opts->measure, "Train the 3 fastest candidates that fit for two steps each: predicted against measured");
  cmd->add_option("--write", opts->write, "Write the resolved recipe (the chosen plan's values in place of auto) to this file");
  cmd->add_flag("--overwrite", opts->overwrite, "Replace an existing --write file");
  cmd->add_flag("--json", opts->json, "Print every candidate, the chosen plan and why as one JSON object");
  cmd->add_flag("--remeasure-machine", opts->remeasure, "Measure this machine's GEMM, copy, dequantisation and loopback rates again");
  cmd->callback([opts, &run] { run = [opts] { return run_plan(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
