// The objectives a recipe can name (objective.name) and the one factory that builds them; the
// seam itself is train/step/objective.h (docs/objectives.md).
#pragma once

#include <memory>
#include <string>

#include "model/decoder.h"
#include "train/objective/options.h"
#include "train/objective/reference_table.h"
#include "train/step/objective.h"

namespace ctune::train {

// Whether the objective reads preference pairs (data.format: preference).
bool reads_pairs(const ObjectiveOptions& options);
// Whether it learns from completions it samples itself (online RL: prompts, data.format prompt).
bool generates(const ObjectiveOptions& options);
// Whether it compares the policy with a frozen reference.
bool needs_reference(const ObjectiveOptions& options);

// `reference`: the frozen model the policy is compared with; null under LoRA, where the policy
// with its adapters off is the reference. `table`: the reference's precomputed log-probabilities
// (objective.precompute_reference), used instead of any reference forward. `chunked`:
// memory.chunked_loss (sft).
std::shared_ptr<Objective> make_objective(const ObjectiveOptions& options, bool chunked,
                                          model::CausalLM reference = model::CausalLM(nullptr),
                                          std::shared_ptr<const ReferenceTable> table = nullptr);

}  // namespace ctune::train
