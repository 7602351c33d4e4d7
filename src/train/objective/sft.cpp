// objective.name sft, the default: next-token supervised fine-tuning on the examples' trained
// tokens (SftObjective, train/step/objective.h). No options, no reference, no summary line.
#include "train/objective/kind.h"

namespace ctune::train {

namespace {
std::shared_ptr<Objective> make(const KindOptions& /*options*/, ObjectiveContext context) {
  return std::make_shared<SftObjective>(context.chunked);
}
}  // namespace

const ObjectiveKind& sft_kind() {
  static const ObjectiveKind kind{"sft", ObjectiveData::examples, nullptr, make};
  return kind;
}

}  // namespace ctune::train
