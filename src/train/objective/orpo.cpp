#include "train/objective/orpo.h"

#include "train/objective/logps.h"

namespace ctune::train {
namespace {

// The chosen rows' NLL targets: every token of the sequence (padding excluded), the rejected
// rows none.
at::Tensor chosen_sequence_labels(const TensorBatch& b) {
  auto labels = at::where(b.segment_ids != 0, b.input_ids, at::full_like(b.input_ids, data::kIgnoreIndex));
  labels.slice(0, 1, labels.size(0), 2).fill_(data::kIgnoreIndex);
  return labels;
}

// log(1 - exp(x)) for x < 0, without cancellation on either side of -ln 2.
at::Tensor log1mexp(const at::Tensor& x) {
  return at::where(x < -0.6931471805599453, at::log1p(-at::exp(x)), at::log(-at::expm1(x)));
}

}  // namespace

double OrpoObjective::units(const TensorBatch& batch) const {
  return pairs_in(batch);
}

double OrpoObjective::token_units(const TensorBatch& batch) const {
  if (batch.rows_per_group != 2 || batch.labels.size(1) < 2) return 0.0;
  const auto labels = chosen_sequence_labels(batch);
  return static_cast<double>((labels.narrow(1, 1, labels.size(1) - 1) != data::kIgnoreIndex).sum().item<std::int64_t>());
}

std::vector<std::string> OrpoObjective::metric_names() const {
  auto names = reward_metric_names();
  names.insert(names.end(), {"nll_loss", "log_odds_ratio", "log_odds_chosen"});
  return names;
}

ObjectiveTerms OrpoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  const auto hidden = policy_hidden(policy, batch);
  const SequenceLogps pi = row_logps(policy, hidden, batch.labels);
  if (units(batch) == 0) return {pi.sum.sum() * 0.0, std::vector<double>(metric_names().size(), 0.0)};
  const auto nll = -row_logps(policy, hidden, chosen_sequence_labels(batch)).sum.sum();
  const PairLogps p = split_pairs(pi);
  const auto avg_c = p.chosen / p.chosen_count.clamp_min(1.0), avg_r = p.rejected / p.rejected_count.clamp_min(1.0);
  const auto log_odds = (avg_c - avg_r) - (log1mexp(avg_c) - log1mexp(avg_r));
  const auto ratio = at::log_sigmoid(log_odds);
  const double beta = options_.beta;
  auto metrics = reward_metric_sums(beta * avg_c, beta * avg_r, avg_c, avg_r);
  metrics.push_back(nll.item<double>());
  metrics.push_back(ratio.detach().sum().item<double>());
  metrics.push_back(log_odds.detach().sum().item<double>());
  return {-beta * ratio.sum(), metrics, nll};
}

namespace {

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<OrpoOptions>();
  o->beta = positive_beta(r, "orpo", o->beta);
  return o;
}

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext /*context*/) {
  return std::make_shared<OrpoObjective>(dynamic_cast<const OrpoOptions&>(options));
}

std::string summary(const KindOptions& options) { return "beta " + summary_number(dynamic_cast<const OrpoOptions&>(options).beta); }

}  // namespace

const ObjectiveKind& orpo_kind() {
  static const ObjectiveKind kind{"orpo", ObjectiveData::pairs, parse, make, nullptr, nullptr, summary};
  return kind;
}

}  // namespace ctune::train
