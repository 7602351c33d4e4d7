#include "train/objective/grpo.h"

#include <ATen/core/grad_mode.h>

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

GrpoObjective::GrpoObjective(const GrpoOptions& options) : options_(options) {
  if (options_.aggregation != "sequence" && options_.aggregation != "token" && options_.aggregation != "fixed")
    throw ConfigError("objective.aggregation: expected sequence, token or fixed, found " + options_.aggregation);
}

double GrpoObjective::units(const TensorBatch& batch) const {
  if (options_.aggregation == "token") return static_cast<double>(batch.target_tokens);
  // Rows: one advantage each (an idle batch has none, and no rows to count).
  return static_cast<double>(batch.advantages.size(0));
}

std::vector<std::string> GrpoObjective::metric_names() const {
  std::vector<std::string> names = {"entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"};
  if (options_.beta > 0) names.insert(names.begin(), "kl");
  return names;
}

ObjectiveTerms GrpoObjective::forward(model::CausalLM& policy, const TensorBatch& batch) {
  const TokenLogps lp =
      token_logps(policy, policy_hidden(policy, batch), batch.labels, options_.temperature, /*entropy=*/true, batch.sequence_ids);
  const auto acc = lp.token.scalar_type();
  const auto old = batch.old_logps.defined() ? batch.old_logps.to(acc) : lp.token.detach();
  const auto ratio = at::exp(lp.token - old);
  const auto adv = batch.advantages.to(acc).index_select(0, lp.row);
  const double lo = 1.0 - options_.epsilon, hi = 1.0 + (options_.epsilon_high > 0 ? options_.epsilon_high : options_.epsilon);
  auto per_token = -at::minimum(ratio * adv, at::clamp(ratio, lo, hi) * adv);
  at::Tensor kl;
  if (options_.beta > 0) {
    const auto d = batch.ref_logps.to(acc) - lp.token;
    kl = at::exp(d) - d - 1.0;
    per_token = per_token + options_.beta * kl;
  }
  const auto rows = batch.advantages.size(0);  // sequences (a shared-prompt row holds a group)
  at::Tensor loss;
  if (options_.aggregation == "sequence") {
    const auto sums = at::zeros({rows}, per_token.options()).index_add(0, lp.row, per_token);
    const auto counts = at::zeros({rows}, per_token.options()).index_add(0, lp.row, at::ones_like(per_token).detach());
    loss = (sums / counts.clamp_min(1.0)).sum();
  } else if (options_.aggregation == "fixed") {
    loss = per_token.sum() / static_cast<double>(options_.max_new_tokens);
  } else {
    loss = per_token.sum();
  }

  at::NoGradGuard no_grad;
  const auto r = ratio.detach();
  const auto low = ((r < lo) & (adv < 0)).to(acc), high = ((r > hi) & (adv > 0)).to(acc);
  std::vector<double> sums;
  if (options_.beta > 0) sums.push_back(kl.detach().sum().item<double>());
  sums.push_back(lp.entropy.sum().item<double>());
  sums.push_back(low.sum().item<double>());
  sums.push_back(high.sum().item<double>());
  sums.push_back((low + high).clamp_max(1.0).sum().item<double>());
  return {loss, sums};
}

}  // namespace ctune::train
