#include "train/objective/kto.h"

#include <ATen/core/grad_mode.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "core/error.h"
#include "train/objective/logps.h"

namespace ctune::train {
namespace {

// The sums behind the figures (KtoObjective::metric_names), in this order.
enum Sum { reward_chosen, reward_rejected, logps_chosen, logps_rejected, kl_times_records, chosen, rejected, kSums };

// Rows first, first + 2, ... of `b`: its records' own rows (first 0) or their KL rows (first 1).
TensorBatch every_other_row(const TensorBatch& b, std::int64_t first) {
  const auto index = at::arange(first, b.input_ids.size(0), 2, b.input_ids.options().dtype(at::kLong));
  TensorBatch out;
  out.input_ids = b.input_ids.index_select(0, index);
  out.labels = b.labels.index_select(0, index);
  out.position_ids = b.position_ids.index_select(0, index);
  out.segment_ids = b.segment_ids.index_select(0, index);
  const auto T = out.labels.size(1);
  out.target_tokens = T < 2 ? 0 : (out.labels.narrow(1, 1, T - 1) != data::kIgnoreIndex).sum().item<std::int64_t>();
  out.eval_split = b.eval_split;
  for (std::size_t r = static_cast<std::size_t>(first); r < b.examples.size(); r += 2) out.examples.push_back(b.examples[r]);
  return out;
}

// The policy's log-probabilities without gradients (the KL rows: no gradient flows through the
// reference point, and TRL runs them under no_grad too); what the forward left whole for a
// backward that will not come is freed, as after a reference forward.
at::Tensor detached_logps(model::CausalLM& policy, const TensorBatch& batch) {
  at::NoGradGuard no_grad;
  auto out = sequence_logps(policy, batch).sum;
  policy->model->scopes->release_all();
  return out;
}

// Per record, whether its completion is desirable ([records] bool on `device`); ShapeError for
// a batch whose rows carry no labels (not unpaired_preference records).
at::Tensor desirable_of(const TensorBatch& b, at::Device device) {
  const auto rows = b.input_ids.size(0);
  if (static_cast<std::int64_t>(b.desirable.size()) != rows)
    throw ShapeError("kto: a batch of " + std::to_string(rows) + " rows with " + std::to_string(b.desirable.size()) +
                     " labels (expected data.format unpaired_preference)");
  std::vector<std::uint8_t> labels;
  for (std::int64_t r = 0; r < rows; r += 2) {
    const std::int8_t l = b.desirable[static_cast<std::size_t>(r)];
    if (l < 0) throw ShapeError("kto: row " + std::to_string(r) + " has no label (expected an unpaired record's own row)");
    labels.push_back(static_cast<std::uint8_t>(l));
  }
  return at::tensor(labels, at::kByte).to(at::kBool).to(device);
}

}  // namespace

KtoObjective::KtoObjective(const KtoOptions& options, model::CausalLM reference, std::shared_ptr<const ReferenceTable> table)
    : options_(options), reference_(std::move(reference)), table_(std::move(table)) {}

double KtoObjective::units(const TensorBatch& batch) const { return pairs_in(batch); }

std::vector<std::string> KtoObjective::metric_names() const {
  return {"rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "kl", "count/chosen", "count/rejected"};
}

ObjectiveTerms KtoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  // A rank's idle batch (no records) runs the same forwards on its one row, so that sharded
  // ranks gather together. The reference first, then the policy's KL rows: the last forward,
  // the only one with gradients, leaves the router statistics a model with experts balances.
  const bool idle = units(batch) == 0;
  const TensorBatch own = idle ? batch : every_other_row(batch, 0), kl_rows = idle ? batch : every_other_row(batch, 1);
  at::Tensor ref;  // [rows] both kinds of row
  if (table_) {
    ref = table_->lookup(batch);  // precomputed (objective.precompute_reference)
  } else {
    ref = reference_logps(policy, reference_, batch).sum;
  }
  const at::Tensor pi_kl = detached_logps(policy, kl_rows);
  const at::Tensor pi = sequence_logps(policy, own).sum;  // [records]
  if (idle) return {pi.sum() * 0.0, std::vector<double>(kSums, 0.0)};

  const auto dtype = pi.scalar_type();
  const auto n = pi.size(0);
  const auto even = at::arange(0, 2 * n, 2, ref.options().dtype(at::kLong)), odd = even + 1;
  const auto ref_own = ref.index_select(0, even).to(dtype), ref_kl = ref.index_select(0, odd).to(dtype);
  // The reference point: the batch's mean KL estimate, clamped at 0, a constant of the loss.
  const auto z = (pi_kl.to(dtype) - ref_kl).mean().clamp_min(0.0).detach();
  const auto ratio = pi - ref_own;
  const double beta = options_.beta;
  const auto desirable = desirable_of(batch, pi.device());
  const auto losses = at::where(desirable, options_.desirable_weight * (1.0 - at::sigmoid(beta * (ratio - z))),
                                options_.undesirable_weight * (1.0 - at::sigmoid(beta * (z - ratio))));
  const at::Tensor loss_sum = losses.sum();  // before the guard: backward runs through it

  at::NoGradGuard no_grad;
  std::vector<double> sums(kSums, 0.0);
  const auto d = desirable.to(dtype), u = 1.0 - d;
  auto total = [](const at::Tensor& t) { return t.detach().sum().item<double>(); };
  sums[reward_chosen] = total(beta * ratio * d);
  sums[reward_rejected] = total(beta * ratio * u);
  sums[logps_chosen] = total(pi * d);
  sums[logps_rejected] = total(pi * u);
  sums[kl_times_records] = z.item<double>() * static_cast<double>(n);
  sums[chosen] = total(d);
  sums[rejected] = total(u);
  return {loss_sum, sums};
}

std::vector<std::pair<std::string, double>> KtoObjective::means(const std::vector<double>& s, double units, double /*token_units*/) const {
  std::vector<std::pair<std::string, double>> out;
  if (s.size() < kSums) return out;
  if (s[chosen] > 0) out.emplace_back("rewards/chosen", s[reward_chosen] / s[chosen]);
  if (s[rejected] > 0) out.emplace_back("rewards/rejected", s[reward_rejected] / s[rejected]);
  if (s[chosen] > 0 && s[rejected] > 0)
    out.emplace_back("rewards/margins", s[reward_chosen] / s[chosen] - s[reward_rejected] / s[rejected]);
  if (s[chosen] > 0) out.emplace_back("logps/chosen", s[logps_chosen] / s[chosen]);
  if (s[rejected] > 0) out.emplace_back("logps/rejected", s[logps_rejected] / s[rejected]);
  out.emplace_back("kl", units > 0 ? s[kl_times_records] / units : 0.0);
  return out;
}

namespace {

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<KtoOptions>();
  o->beta = positive_beta(r, "kto", o->beta);
  o->desirable_weight = r.get_optional_float("objective.desirable_weight").value_or(o->desirable_weight);
  o->undesirable_weight = r.get_optional_float("objective.undesirable_weight").value_or(o->undesirable_weight);
  o->precompute_reference = !r.is_null("objective.precompute_reference") && r.get_bool("objective.precompute_reference");
  // The KL rows pair each record with its neighbour's completion in the file's order, a batch
  // being one block of neighbours (data/kl_rows.h): TRL's KTOTrainer refuses other orders and a
  // batch of one (whose KL row is its own completion: the reference point would be the reward).
  if (r.get_bool("data.shuffle"))
    r.fail("data.shuffle", "objective.name kto estimates its KL baseline from each batch's completions paired with the batch's other "
                           "prompts, built in the file's order (TRL's KTOTrainer requires sequential sampling too): set data.shuffle: "
                           "false, and shuffle the file itself");
  if (!r.is_auto("training.batch_size") && r.get_int("training.batch_size") < 2)
    r.fail("training.batch_size", "objective.name kto needs at least 2 completions per batch for its KL baseline, found " +
                                      std::to_string(r.get_int("training.batch_size")));
  return o;
}

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext c) {
  return std::make_shared<KtoObjective>(dynamic_cast<const KtoOptions&>(options), std::move(c.reference), std::move(c.table));
}

bool reference(const KindOptions& /*options*/) { return true; }

bool precomputed(const KindOptions& options) { return dynamic_cast<const KtoOptions&>(options).precompute_reference; }

std::string summary(const KindOptions& options) {
  const auto& o = dynamic_cast<const KtoOptions&>(options);
  return "beta " + summary_number(o.beta) + ", desirable weight " + summary_number(o.desirable_weight) + ", undesirable weight " +
         summary_number(o.undesirable_weight);
}

// Both labels are needed (a reference point against which one class only is pushed is not KTO):
// refused, where TRL only warns about the weights. The weights are checked against the KTO
// paper's Eq. (8), lambda_D n_D / (lambda_U n_U) in [1, 4/3], with a warning as TRL's.
void check_records(const KindOptions& options, const data::Datasets& ds) {
  const auto& o = dynamic_cast<const KtoOptions&>(options);
  double desirable = 0, undesirable = 0;
  for (const data::Example& e : *ds.train) {
    if (e.desirable == 1) ++desirable;
    if (e.desirable == 0) ++undesirable;
  }
  if (desirable == 0 || undesirable == 0)
    throw ConfigError(ds.train_stats.file + ": every completion's label is " + (desirable == 0 ? "false" : "true") +
                      " (data.columns.label); objective.name kto needs both desirable and undesirable completions");
  const double ratio = o.desirable_weight * desirable / (o.undesirable_weight * undesirable);
  if (desirable != undesirable && (ratio < 1.0 || ratio > 4.0 / 3.0))
    spdlog::warn("kto: {} desirable and {} undesirable completions with objective.desirable_weight {} and undesirable_weight {}: "
                 "the KTO paper recommends desirable_weight x desirable / (undesirable_weight x undesirable) in [1, 4/3], e.g. "
                 "desirable_weight in [{:.3g}, {:.3g}] (docs/objectives.md#kto)",
                 desirable, undesirable, o.desirable_weight, o.undesirable_weight, o.undesirable_weight * undesirable / desirable,
                 4.0 / 3.0 * o.undesirable_weight * undesirable / desirable);
}

}  // namespace

const ObjectiveKind& kto_kind() {
  // One row of each record keeps activations: the KL row runs without gradients.
  static const ObjectiveKind kind{"kto",   ObjectiveData::unpaired, parse,   make,          reference, precomputed,
                                  summary, nullptr,                 nullptr, nullptr,       nullptr,   check_records,
                                  nullptr, /*gradient_rows_per_record=*/1};
  return kind;
}

}  // namespace ctune::train
