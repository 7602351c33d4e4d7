// What a run directory says about its run, read for the report: metrics.jsonl (steps,
// evaluations, the memory ledger record), recipe.yaml, the run marker (resume records), checkpoints/ and the
// result. Whatever cannot be read is listed in `problems` rather than thrown, so a report shows
// what is known.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

namespace ctune::report {

struct StepRecord {
  std::int64_t step = 0;
  double time = 0, loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  std::int64_t tokens = 0, input_tokens = 0, peak_mem_bytes = 0;
  bool skipped = false;
  // A model with experts: the routers' load-balancing loss (NaN when absent) and, per sparse
  // layer, each expert's share of the routed tokens.
  double aux_loss = 0;
  std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load;
  // The objective's own figures (DPO: rewards/chosen, rewards/accuracies, ...; GRPO: reward,
  // rewards/NAME/mean, completions/..., kl, ...): every key with a '/' in its name, and GRPO's
  // few without one.
  std::map<std::string, double> objective;
  // logging.profile: milliseconds per category, as metrics.jsonl lists them (empty when off).
  std::vector<std::pair<std::string, double>> profile_ms;
};

struct EvalRecord {
  std::int64_t step = 0;
  double time = 0, loss = 0;
  std::map<std::string, double> objective;  // as StepRecord's, without the eval_ prefix
};

struct RunData {
  std::filesystem::path dir;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::optional<Json> memory;  // the ledger record of metrics.jsonl ({"memory": ...})
  std::optional<Json> samples;  // grpo: the last line of samples.jsonl ({"step", "seed", "groups"})
  std::string recipe_yaml;     // empty when missing
  // From the recipe (empty when it cannot be read).
  std::string model, method, precision, train_data, eval_data;
  std::int64_t max_steps = 0;  // 0: unknown
  std::vector<std::int64_t> resumes;  // steps a session resumed from (the run marker's records)
  std::vector<std::string> checkpoints;
  std::string result;  // "adapter/" or "model/" when the run wrote its result
  std::string status;  // "finished", "running" or "stopped"
  std::vector<std::string> problems;
};

// IoError when `dir` is not a directory or holds neither metrics.jsonl nor recipe.yaml.
RunData read_run(const std::filesystem::path& dir);

}  // namespace ctune::report
