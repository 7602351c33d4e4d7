// The objectives a recipe can name (objective.name): the registry of kinds (train/objective/kind.h,
// one line each in registry.cpp) and the one factory. The seam itself is train/step/objective.h
// (docs/objectives.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/objective/reference_table.h"
#include "train/step/objective.h"

namespace ctune::train {

// Every registered kind, in registry order (the schema's order of objective.name's values).
const std::vector<const ObjectiveKind*>& all_objective_kinds();
// The kind named `name`; ConfigError naming every objective when none is.
const ObjectiveKind& objective_kind(const std::string& name);
// The kinds that learn from `data`, as messages list them: "dpo, simpo or orpo".
std::string objective_names(ObjectiveData data);

// `reference`: the frozen model the policy is compared with; null under LoRA, where the policy
// with its adapters off is the reference. `table`: the reference's precomputed log-probabilities
// (objective.precompute_reference), used instead of any reference forward. `chunked`:
// memory.chunked_loss (sft). `teacher`: the kind's teacher (distill), frozen; null: none.
std::shared_ptr<Objective> make_objective(const ObjectiveOptions& options, bool chunked,
                                          model::CausalLM reference = model::CausalLM(nullptr),
                                          std::shared_ptr<const ReferenceTable> table = nullptr,
                                          model::CausalLM teacher = model::CausalLM(nullptr));

}  // namespace ctune::train
