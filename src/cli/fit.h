// Planning a run for a memory budget, shared by `ctune plan` and `ctune train --fit`
// (train/plan/planner.h does the search; this prints it).
#pragma once

#include <string>

#include "core/recipe.h"
#include "distributed/world.h"
#include "train/plan/planner.h"
#include "train/run/out_of_memory.h"

namespace ctune::cli {

// The world of a run on `nproc` ranks over `nodes` nodes of nproc/nodes each, as `estimate` and
// `plan` describe it (--nproc, --nodes); ConfigError when the nodes do not divide the ranks.
distributed::World planned_world(int nproc, int nodes);

// Plans `recipe` for `budget` ("24GB", "500MiB": --budget/--fit's text) on `world`, prints the
// candidates' table and the chosen plan with why (unless `quiet`), and returns the result.
// With `json`, one JSON object (train::PlanResult::to_json) instead, also when nothing fits.
// Throws ConfigError with the one line when nothing fits, or when the budget is not a size.
train::PlanResult plan_for_budget(const Recipe& recipe, const distributed::World& world, const std::string& budget, bool quiet,
                                  bool remeasure = false, bool json = false);

// After `recipe`'s run ran out of memory: the techniques that would fit the limit (or the
// device) with the recipe's precision and method kept (they change what is computed; the
// planner's are checkpointing, the micro-batch with the global batch kept, the chunked loss, a
// quantised base under LoRA, sharding and offload with several ranks). "; a plan that fits ..."
// with the keys it changes, or "; nothing fits ..." (the planner's line). Planning needs the
// machine's rates (cached; measured once otherwise).
std::string plan_after_out_of_memory(const Recipe& recipe, const distributed::World& world, const train::OutOfMemory& oom);

}  // namespace ctune::cli
