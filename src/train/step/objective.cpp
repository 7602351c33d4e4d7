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
    if (terms.token_loss_sum.defined()) out.token_loss += terms.token_loss_sum.item<double>();
    out.token_units += objective.token_units(batch);
    out.target_tokens += batch.target_tokens;
    for (std::size_t i = 0; i < out.metrics.size() && i < terms.metric_sums.size(); ++i) out.metrics[i] += terms.metric_sums[i];
    if (stage) {
      stage->update(stage->done() + 1, 0, [&] {
        char text[48];
        std::snprintf(text, sizeof(text), "loss %.4f", mean_loss(out));
        return std::string(text);
      });
    }
  }
  if (was_training) lm->train();
  return out;
}

double mean_loss(const ObjectiveSums& s) {
  return (s.units > 0 ? s.loss / s.units : 0.0) + (s.token_units > 0 ? s.token_loss / s.token_units : 0.0);
}

std::vector<std::pair<std::string, double>> metric_means(const Objective& objective, const std::vector<double>& sums, double units,
                                                         double token_units) {
  return objective.means(sums, units, token_units);
}

std::vector<std::pair<std::string, double>> Objective::means(const std::vector<double>& sums, double units, double token_units) const {
  const auto names = metric_names();
  const auto per_token = per_token_metrics();
  std::vector<std::pair<std::string, double>> out;
  for (std::size_t i = 0; i < names.size() && i < sums.size(); ++i) {
    const double n = std::find(per_token.begin(), per_token.end(), names[i]) != per_token.end() ? token_units : units;
    out.emplace_back(names[i], n > 0 ? sums[i] / n : 0.0);
  }
  return out;
}

}  // namespace ctune::train
