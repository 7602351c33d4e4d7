#include "train/objective/simpo.h"

#include "train/objective/logps.h"

namespace ctune::train {

double SimpoObjective::units(const TensorBatch& batch) const {
  return pairs_in(batch);
}

std::vector<std::string> SimpoObjective::metric_names() const { return reward_metric_names(); }

ObjectiveTerms SimpoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  const SequenceLogps pi = sequence_logps(policy, batch);
  if (units(batch) == 0) return {pi.sum.sum() * 0.0, std::vector<double>(metric_names().size(), 0.0)};
  const PairLogps p = split_pairs(pi);
  const auto avg_c = p.chosen / p.chosen_count.clamp_min(1.0), avg_r = p.rejected / p.rejected_count.clamp_min(1.0);
  const double beta = options_.beta, eps = options_.label_smoothing;
  const auto z = beta * (avg_c - avg_r - options_.gamma / beta);
  const auto losses = -(1.0 - eps) * at::log_sigmoid(z) - eps * at::log_sigmoid(-z);
  return {losses.sum(), reward_metric_sums(beta * avg_c, beta * avg_r, avg_c, avg_r)};
}

namespace {

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<SimpoOptions>();
  o->beta = positive_beta(r, "simpo", o->beta);
  o->label_smoothing = r.get_optional_float("objective.label_smoothing").value_or(o->label_smoothing);
  o->gamma = r.get_optional_float("objective.gamma").value_or(o->gamma);
  return o;
}

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext /*context*/) {
  return std::make_shared<SimpoObjective>(dynamic_cast<const SimpoOptions&>(options));
}

std::string summary(const KindOptions& options) {
  const auto& o = dynamic_cast<const SimpoOptions&>(options);
  return "beta " + summary_number(o.beta) + ", gamma " + std::to_string(o.gamma) +
         (o.label_smoothing > 0 ? ", label smoothing " + std::to_string(o.label_smoothing) : std::string());
}

}  // namespace

const ObjectiveKind& simpo_kind() {
  static const ObjectiveKind kind{"simpo", ObjectiveData::pairs, parse, make, nullptr, nullptr, summary};
  return kind;
}

}  // namespace ctune::train
