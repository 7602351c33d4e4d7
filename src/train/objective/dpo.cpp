#include "train/objective/dpo.h"

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "train/objective/logps.h"

namespace ctune::train {

DpoObjective::DpoObjective(const DpoOptions& options, model::CausalLM reference, std::shared_ptr<const ReferenceTable> table)
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

namespace {

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<DpoOptions>();
  o->loss_type = r.get_optional_string("objective.loss_type").value_or(o->loss_type);
  if (o->loss_type != "sigmoid" && o->loss_type != "ipo" && o->loss_type != "hinge")  // the schema's list holds grpo's too
    r.fail("objective.loss_type", "objective.name dpo expects sigmoid, ipo or hinge, found " + o->loss_type);
  o->beta = positive_beta(r, "dpo", o->beta);
  o->label_smoothing = r.get_optional_float("objective.label_smoothing").value_or(o->label_smoothing);
  o->precompute_reference = !r.is_null("objective.precompute_reference") && r.get_bool("objective.precompute_reference");
  if (o->label_smoothing > 0 && o->loss_type != "sigmoid")
    r.fail("objective.label_smoothing", "applies to objective.loss_type sigmoid, found " + o->loss_type);
  return o;
}

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext c) {
  return std::make_shared<DpoObjective>(dynamic_cast<const DpoOptions&>(options), std::move(c.reference), std::move(c.table));
}

bool reference(const KindOptions& /*options*/) { return true; }

bool precomputed(const KindOptions& options) { return dynamic_cast<const DpoOptions&>(options).precompute_reference; }

std::string summary(const KindOptions& options) {
  const auto& o = dynamic_cast<const DpoOptions&>(options);
  return o.loss_type + ", beta " + summary_number(o.beta) +
         (o.label_smoothing > 0 ? ", label smoothing " + std::to_string(o.label_smoothing) : std::string());
}

}  // namespace

const ObjectiveKind& dpo_kind() {
  static const ObjectiveKind kind{"dpo", ObjectiveData::pairs, parse, make, reference, precomputed, summary};
  return kind;
}

}  // namespace ctune::train
