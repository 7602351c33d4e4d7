#include "train/step/objective.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>

namespace ctune::train {

ObjectiveSums evaluate_objective(Objective& objective, model::CausalLM& lm, const std::vector<TensorBatch>& batches,
                                 Stage* stage) {
  at::NoGradGuard no_grad;
  const bool was_training = lm->is_training();
  lm->eval();
  ObjectiveSums out;
  out.metrics.assign(objective.metric_names().size(), 0.0);
  for (const auto& batch : batches) {
    const ObjectiveTerms terms = objective.forward(lm, batch);
    out.loss += terms.loss_sum.item<double>();
    out.units += objective.units(batch);
    out.target_tokens += batch.target_tokens;
    for (std::size_t i = 0; i < out.metrics.size() && i < terms.metric_sums.size(); ++i) out.metrics[i] += terms.metric_sums[i];
    if (stage) {
      stage->update(stage->done() + 1, 0, [&] {
        char text[48];
        std::snprintf(text, sizeof(text), "loss %.4f", out.loss / std::max(1.0, out.units));
        return std::string(text);
      });
    }
  }
  if (was_training) lm->train();
  return out;
}

}  // namespace ctune::train
