#include "train/objective/objectives.h"

#include "core/error.h"
#include "train/objective/dpo.h"
#include "train/objective/grpo.h"
#include "train/objective/orpo.h"
#include "train/objective/simpo.h"

namespace ctune::train {

bool reads_pairs(const ObjectiveOptions& options) { return options.name == "dpo" || options.name == "simpo" || options.name == "orpo"; }

bool needs_reference(const ObjectiveOptions& options) {
  return options.name == "dpo" || (options.name == "grpo" && options.beta > 0);
}

bool generates(const ObjectiveOptions& options) { return options.name == "grpo"; }

std::shared_ptr<Objective> make_objective(const ObjectiveOptions& options, bool chunked, model::CausalLM reference,
                                          std::shared_ptr<const ReferenceTable> table) {
  if (options.name == "sft") return std::make_shared<SftObjective>(chunked);
  if (options.name == "dpo") return std::make_shared<DpoObjective>(options, std::move(reference), std::move(table));
  if (options.name == "simpo") return std::make_shared<SimpoObjective>(options);
  if (options.name == "orpo") return std::make_shared<OrpoObjective>(options);
  if (options.name == "grpo") return std::make_shared<GrpoObjective>(options);
  throw ConfigError("objective.name: expected sft, dpo, simpo, orpo or grpo, found " + options.name);
}

}  // namespace ctune::train
