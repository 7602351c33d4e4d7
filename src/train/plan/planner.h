// `ctune plan` (docs/planning.md): the techniques of a run chosen for a memory budget. Keys the
// recipe sets are constraints; keys set to `auto` (the schema's planned keys: precision,
// peft.method, memory.quantize_base, memory.activation_checkpointing, training.batch_size with
// training.global_batch_size, memory.chunked_loss, distributed.strategy, distributed.cpu_offload)
// are searched over every combination that can run. A candidate fits when its predicted peak
// plus kPlanHeadroom of it is within the budget: the ledger is held to under-predict by at
// most 5% (scripts/bench_memory.sh), so a plan that fits on paper fits when it runs. Each candidate gets the memory ledger's
// peak per device and the step-time model's tokens/s (train/forecast/step_time.h); the plan is the
// fastest candidate that fits, near-ties (within 2%) going to the one that turns on fewer
// techniques in the order the field applies them (mixed precision, LoRA, checkpointing, a
// quantised base, offload; sharding first with several devices).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/recipe.h"
#include "distributed/world.h"
#include "train/forecast/memory_ledger.h"
#include "train/forecast/step_time.h"
#include "train/run/run_plan.h"

namespace ctune::train {

inline constexpr double kPlanHeadroom = 0.05;

struct Candidate {
  Techniques techniques;
  Ledger ledger;
  StepTime time;
  bool fits = false;
};

// What one switch of the chosen plan did: the plan with that key back at its default, and the
// ledger lines it moved.
struct SwitchEffect {
  std::string key, value, default_value;
  std::int64_t peak_without = 0;  // 0: the plan cannot run without it (say, nf4 without LoRA)
  double tokens_per_s_without = 0;
  std::vector<std::pair<std::string, std::int64_t>> moved;  // ledger line -> bytes saved (> 0) or added
};

struct PlanResult {
  std::int64_t budget = 0;
  std::vector<std::string> auto_keys;  // the planner's keys, in the schema's order
  std::vector<Candidate> candidates;   // every combination that can run, fastest first
  std::optional<std::size_t> chosen;   // index into candidates; none when nothing fits
  std::vector<SwitchEffect> why;
  std::string nothing_fits;            // the one line when nothing fits
  MachineRates rates;
  Recipe resolved;                     // the recipe with the chosen techniques (when chosen)

  std::string table(std::size_t max_rows = 16) const;  // candidates, what fits, the chosen
  std::string explanation() const;                     // the chosen plan and why
  Json to_json() const;  // every candidate (overrides, peak, tokens/s, fits), the chosen, why
};

// "lora, 2 x 8, bf16": the values of `keys` (planned keys) in `t`, as the table shows them.
std::string describe_techniques(const Techniques& t, const std::vector<std::string>& keys);

// `budget`: bytes per device. Throws ConfigError for auto on a recipe the planner cannot resolve
// (batch_size auto without global_batch_size, a global batch the ranks do not divide).
// `rates` is asked only once some candidate fits (measuring takes seconds; a plan that cannot fit
// needs no ranking), and after the process's own memory was read for the ledger.
// `runtime`: the ledger's runtime line (what a process holds before its model); by default this
// process's own memory now.
PlanResult plan_techniques(const Recipe& recipe, const distributed::World& world, std::int64_t budget,
                           const std::function<MachineRates()>& rates, std::optional<std::int64_t> runtime = std::nullopt);

}  // namespace ctune::train
