#include "train/objective/grpo.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "core/error.h"
#include "train/objective/logps.h"

namespace ctune::train {

at::Tensor group_advantages(const at::Tensor& rewards, std::int64_t group, const std::string& scale) {
  const auto r = rewards.to(at::kDouble);
  const auto n = r.numel();
  if (group < 1 || n % group != 0) throw std::logic_error("group_advantages: rows are not whole groups");
  const auto grouped = r.view({n / group, group});
  const auto mean = grouped.mean(1, true).expand({n / group, group}).reshape({n});
  auto adv = r - mean;
  if (scale == "none") return adv;
  at::Tensor std;
  if (scale == "group") {
    std = group > 1 ? grouped.std(1, /*unbiased=*/true, true).expand({n / group, group}).reshape({n}) : at::zeros_like(r);
  } else {
    std = n > 1 ? r.std(/*unbiased=*/true).expand({n}) : at::zeros_like(r);
  }
  return adv / (std + 1e-4);
}

at::Tensor normalized_sum_advantages(const at::Tensor& scores, const at::Tensor& weights, std::int64_t group) {
  const auto s = scores.to(at::kDouble);
  const auto n = s.size(0), f = s.size(1);
  if (group < 1 || n % group != 0) throw std::logic_error("normalized_sum_advantages: rows are not whole groups");
  const auto grouped = s.view({n / group, group, f});
  const auto mean = grouped.mean(1, true);
  const auto std = group > 1 ? grouped.std(1, /*unbiased=*/true, true) : at::zeros_like(mean);
  const auto sums = ((grouped - mean) / (std + 1e-4)).view({n, f}).mul(weights.to(at::kDouble).view({1, f})).sum(1);
  const auto batch_std = n > 1 ? sums.std(/*unbiased=*/true) : at::zeros({}, sums.options());
  return (sums - sums.mean()) / (batch_std + 1e-4);
}

at::Tensor leave_one_out_advantages(const at::Tensor& rewards, std::int64_t group, bool normalize) {
  const auto r = rewards.to(at::kDouble);
  const auto n = r.numel();
  if (group < 2 || n % group != 0) throw std::logic_error("leave_one_out_advantages: rows are not whole groups of two or more");
  const auto grouped = r.view({n / group, group});
  const auto baseline = (grouped.sum(1, true) - grouped) / static_cast<double>(group - 1);
  auto adv = (grouped - baseline).reshape({n});
  if (normalize) adv = (adv - adv.mean()) / ((n > 1 ? adv.std(/*unbiased=*/true) : at::zeros({}, adv.options())) + 1e-4);
  return adv;
}

namespace {

bool per_token_units(const std::string& loss_type) { return loss_type == "dapo" || loss_type == "cispo"; }

// The tokens whose entropy is at least the (1 - q) quantile of the micro-batch's (linear
// interpolation, as torch.quantile), 1 or 0 per target.
at::Tensor high_entropy_mask(const at::Tensor& entropy, double q) {
  if (entropy.numel() == 0) return at::ones_like(entropy);
  const auto threshold = at::quantile(entropy, 1.0 - q);
  return (entropy >= threshold).to(entropy.scalar_type());
}

}  // namespace

GrpoObjective::GrpoObjective(const GrpoOptions& options) : options_(options) {
  const auto& t = options_.loss_type;
  if (!is_grpo_loss_type(t)) throw ConfigError("objective.loss_type: expected grpo, bnpo, dr_grpo, dapo or cispo, found " + t);
  if (options_.importance_sampling_level != "token" && options_.importance_sampling_level != "sequence")
    throw ConfigError("objective.importance_sampling_level: expected token or sequence, found " + options_.importance_sampling_level);
}

double GrpoObjective::units(const TensorBatch& batch) const {
  if (!options_.leave_one_out && per_token_units(options_.loss_type)) return static_cast<double>(batch.target_tokens);
  // Rows: one advantage each (an idle batch has none, and no rows to count).
  return static_cast<double>(batch.advantages.size(0));
}

std::vector<std::string> GrpoObjective::metric_names() const {
  std::vector<std::string> names = {"entropy"};
  if (options_.loss_type == "cispo" && !options_.leave_one_out)
    names.push_back("cispo_clip_ratio");
  else
    names.insert(names.end(), {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"});
  if (options_.beta > 0) names.insert(names.begin(), "kl");
  names.push_back("completions");  // a denominator, not reported: the clip ratios' at the sequence level
  return names;
}

// kl and entropy per completion token; the clip ratios per token, or per completion when the
// importance weights are per sequence (TRL's global_masked_mean of a [B, 1] tensor).
std::vector<std::pair<std::string, double>> GrpoObjective::means(const std::vector<double>& sums, double /*units*/, double token_units) const {
  const auto names = metric_names();
  const bool per_completion = options_.importance_sampling_level == "sequence" || options_.leave_one_out;
  std::vector<std::pair<std::string, double>> out;
  if (sums.size() < names.size()) return out;
  const double completions = sums.back();
  for (std::size_t i = 0; i + 1 < names.size(); ++i) {
    const bool clip = names[i] != "kl" && names[i] != "entropy";
    const double n = clip && per_completion ? completions : token_units;
    out.emplace_back(names[i], n > 0 ? sums[i] / n : 0.0);
  }
  return out;
}

ObjectiveTerms GrpoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  const auto hidden = policy_hidden(policy, batch);
  const TokenLogps lp = token_logps(policy, hidden, batch.labels, options_.temperature, /*entropy=*/true, batch.sequence_ids);
  if (options_.leave_one_out) return rloo_forward(lp, batch);
  const auto acc = lp.token.scalar_type();
  const auto rows = batch.advantages.size(0);  // sequences (a shared-prompt row holds a group)
  const auto per_row = [&](const at::Tensor& x) { return at::zeros({rows}, x.options()).index_add(0, lp.row, x); };
  const auto tokens_per_row = per_row(at::ones_like(lp.token).detach());
  const auto old = batch.old_logps.defined() ? batch.old_logps.to(acc) : lp.token.detach();
  auto log_weight = lp.token - old;
  const bool sequence_level = options_.importance_sampling_level == "sequence";
  if (sequence_level) log_weight = (per_row(log_weight) / tokens_per_row.clamp_min(1.0)).index_select(0, lp.row);
  const auto weight = at::exp(log_weight);
  const auto adv = batch.advantages.to(acc).index_select(0, lp.row);
  const double lo = 1.0 - options_.epsilon, eps_high = options_.epsilon_high > 0 ? options_.epsilon_high : options_.epsilon, hi = 1.0 + eps_high;
  at::Tensor per_token;
  if (options_.loss_type == "cispo") {
    per_token = -at::clamp_max(weight, eps_high).detach() * adv * lp.token;
  } else {
    const auto capped = options_.delta > 0 ? at::clamp_max(weight, options_.delta) : weight;
    per_token = -at::minimum(capped * adv, at::clamp(weight, lo, hi) * adv);
  }
  at::Tensor trained;  // the top-entropy tokens (1 or 0 per target); undefined: every target
  if (options_.top_entropy_quantile < 1.0) {
    trained = high_entropy_mask(lp.entropy.detach(), options_.top_entropy_quantile);
    per_token = per_token * trained;
  }
  at::Tensor kl;
  if (options_.beta > 0) {
    const auto d = batch.ref_logps.to(acc) - lp.token;
    kl = at::exp(d) - d - 1.0;
    per_token = per_token + options_.beta * kl;
  }
  at::Tensor loss;
  const auto& type = options_.loss_type;
  if (type == "grpo") {
    loss = (per_row(per_token) / tokens_per_row.clamp_min(1.0)).sum();
  } else if (type == "bnpo") {
    loss = per_token.sum() * (static_cast<double>(rows) / std::max<double>(1.0, static_cast<double>(per_token.numel())));
  } else if (type == "dr_grpo") {
    loss = per_token.sum() / static_cast<double>(options_.max_new_tokens);
  } else {
    loss = per_token.sum();
  }
  if (options_.entropy_coef != 0) loss = loss - options_.entropy_coef * entropy_bonus(policy, hidden, batch, trained);
  return {loss, metric_sums(weight.detach(), adv, kl, lp, tokens_per_row, lo, hi, eps_high)};
}

// TRL's entropy bonus before its coefficient, as the unit normalises it: the trained tokens'
// entropies (at the sampling temperature, with their gradient) summed, the step's mean per token
// after the trainer divides by the step's tokens (dapo, cispo); else this micro-batch's mean
// times its rows (completions), each micro-batch's mean averaged over the step's after the
// division by its rows.
at::Tensor GrpoObjective::entropy_bonus(model::CausalLM& policy, const at::Tensor& hidden, const TensorBatch& batch, const at::Tensor& trained) const {
  const auto h = target_hidden(hidden, batch.labels);
  const auto weights = trained.defined() ? trained : at::ones({h.size(0)}, h.options().dtype(at::kFloat));
  const auto sum = weighted_entropy_sum(policy, h, weights, options_.temperature);
  if (per_token_units(options_.loss_type)) return sum;
  const double rows = static_cast<double>(batch.advantages.size(0));
  return sum * (rows / std::max(1.0, weights.sum().item<double>()));
}

// RLOO (TRL's RLOOTrainer._compute_loss): w = exp(sum over the completion of logp - old), the
// clipped surrogate per completion, summed over completions (units: completions). The KL is in
// the advantages already; its figure is the mean per token of old - ref (the first-order
// estimate the penalty used).
ObjectiveTerms GrpoObjective::rloo_forward(const TokenLogps& lp, const TensorBatch& batch) const {
  const auto acc = lp.token.scalar_type();
  const auto rows = batch.advantages.size(0);
  const auto per_row = [&](const at::Tensor& x) { return at::zeros({rows}, x.options()).index_add(0, lp.row, x); };
  const auto tokens_per_row = per_row(at::ones_like(lp.token).detach());
  const auto old = batch.old_logps.defined() ? batch.old_logps.to(acc) : lp.token.detach();
  const auto weight = at::exp(per_row(lp.token - old));
  const auto adv = batch.advantages.to(acc);
  const double lo = 1.0 - options_.epsilon, eps_high = options_.epsilon_high > 0 ? options_.epsilon_high : options_.epsilon, hi = 1.0 + eps_high;
  // A completion without targets (mask_truncated_completions) has w = 1 and adds -A to the value,
  // nothing to the gradient, as in TRL.
  const auto loss = (-at::minimum(weight * adv, at::clamp(weight, lo, hi) * adv)).sum();
  at::NoGradGuard no_grad;
  std::vector<double> sums;
  if (options_.beta > 0) sums.push_back((old - batch.ref_logps.to(acc)).sum().item<double>());
  sums.push_back(lp.entropy.sum().item<double>());
  const auto w = weight.detach();
  const auto low = ((w < lo) & (adv < 0)).to(acc), high = ((w > hi) & (adv > 0)).to(acc);
  sums.push_back(low.sum().item<double>());
  sums.push_back(high.sum().item<double>());
  sums.push_back((low + high).clamp_max(1.0).sum().item<double>());
  sums.push_back(static_cast<double>((tokens_per_row > 0).sum().item<std::int64_t>()));
  return {loss, sums};
}

std::vector<double> GrpoObjective::metric_sums(const at::Tensor& weight, const at::Tensor& adv, const at::Tensor& kl, const TokenLogps& lp,
                                               const at::Tensor& tokens_per_row, double lo, double hi, double eps_high) const {
  at::NoGradGuard no_grad;
  const auto acc = weight.scalar_type();
  // At the sequence level every token of a completion carries its weight: one count per completion.
  const auto count = [&](const at::Tensor& flags) {
    const auto f = flags.to(acc);
    if (options_.importance_sampling_level != "sequence") return f.sum().item<double>();
    const auto rows = tokens_per_row.size(0);
    const auto per_row = at::zeros({rows}, acc).index_add(0, lp.row, f) / tokens_per_row.clamp_min(1.0);
    return per_row.sum().item<double>();
  };
  std::vector<double> sums;
  if (options_.beta > 0) sums.push_back(kl.detach().sum().item<double>());
  sums.push_back(lp.entropy.sum().item<double>());
  if (options_.loss_type == "cispo") {
    sums.push_back(count((weight > eps_high) & (adv > 0)));
  } else {
    const auto low = (weight < lo) & (adv < 0), high = (weight > hi) & (adv > 0);
    sums.push_back(count(low));
    sums.push_back(count(high));
    sums.push_back(count(low | high));
  }
  sums.push_back(static_cast<double>((tokens_per_row > 0).sum().item<std::int64_t>()));
  return sums;
}

}  // namespace ctune::train
