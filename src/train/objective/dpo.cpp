#include "train/objective/dpo.h"

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "train/objective/logps.h"

namespace ctune::train {

DpoObjective::DpoObjective(const ObjectiveOptions& options, model::CausalLM reference, std::shared_ptr<const ReferenceTable> table)
    : options_(options), reference_(std::move(reference)), table_(std::move(table)) {
  if (options_.loss_type != "sigmoid" && options_.loss_type != "ipo" && options_.loss_type != "hinge")
    throw ConfigError("objective.loss_type: expected sigmoid, ipo or hinge, found " + options_.loss_type);
}

double DpoObjective::units(const TensorBatch& batch) const {
  return pairs_in(batch);
}

std::vector<std::string> DpoObjective::metric_names() const { return reward_metric_names(); }

ObjectiveTerms DpoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  // The reference first: its forward must not replace the policy's router statistics.
  SequenceLogps ref;
  if (table_) {
    ref.sum = table_->lookup(batch);  // precomputed (objective.precompute_reference)
    ref.count = at::zeros_like(ref.sum);  // not needed: IPO divides by the policy's counts
  } else {
    ref = reference_logps(policy, reference_, batch);
  }
  const SequenceLogps pi = sequence_logps(policy, batch);
  if (units(batch) == 0) return {pi.sum.sum() * 0.0, std::vector<double>(metric_names().size(), 0.0)};

  const PairLogps p = split_pairs(pi), r = split_pairs(ref);
  const auto ratio_c = p.chosen - r.chosen.to(p.chosen.scalar_type()), ratio_r = p.rejected - r.rejected.to(p.chosen.scalar_type());
  const double beta = options_.beta;
  at::Tensor losses;
  if (options_.loss_type == "sigmoid") {
    const auto delta = beta * (ratio_c - ratio_r);
    const double eps = options_.label_smoothing;
    losses = -(1.0 - eps) * at::log_sigmoid(delta) - eps * at::log_sigmoid(-delta);
  } else if (options_.loss_type == "hinge") {
    losses = at::relu(1.0 - beta * (ratio_c - ratio_r));
  } else {  // ipo: per-token log-ratios, as TRL normalises them
    const auto n_c = p.chosen_count.clamp_min(1.0), n_r = p.rejected_count.clamp_min(1.0);
    losses = at::pow(ratio_c / n_c - ratio_r / n_r - 1.0 / (2.0 * beta), 2);
  }

  return {losses.sum(), reward_metric_sums(beta * ratio_c, beta * ratio_r, p.chosen, p.rejected)};
}

}  // namespace ctune::train
