// Group relative policy optimisation (Shao et al. 2024) with TRL's GRPOTrainer semantics
// (docs/objectives.md#grpo): the loss of a batch of sampled completions, each row a prompt and one
// of its completions (the completion's tokens the targets), with the row's advantage and, per
// target, the log-probabilities of the policy that sampled it (old) and of the reference
// (train/objective/rollout.h fills them). Per target token, with ratio = exp(logp - old):
//   loss_t = -min(ratio A, clip(ratio, 1 - epsilon, 1 + epsilon_high) A) + beta k3_t,
//   k3_t   = exp(ref - logp) - (ref - logp) - 1
// aggregated as
//   sequence  (GRPO)      mean over rows of each row's mean over its tokens   units: rows
//   token     (DAPO)      sum over tokens / the step's completion tokens      units: tokens
//   fixed     (Dr. GRPO)  sum over tokens / (rows x max_new_tokens)           units: rows
// logp at the sampling temperature. Metrics per completion token: kl, entropy, clip_ratio/low_mean,
// clip_ratio/high_mean, clip_ratio/region_mean (TRL's names).
#pragma once

#include "model/decoder.h"
#include "train/objective/options.h"
#include "train/step/objective.h"

namespace ctune::train {

// Advantages from the summed rewards of consecutive groups of `group` rows: reward minus its
// group's mean, divided by (std + 1e-4) where std is the group's (`group`), the whole batch's
// (`batch`) or not at all (`none`); std with Bessel's correction, as TRL's nanstd. float64 [rows].
at::Tensor group_advantages(const at::Tensor& rewards, std::int64_t group, const std::string& scale);

class GrpoObjective : public Objective {
 public:
  explicit GrpoObjective(const ObjectiveOptions& options);
  std::string name() const override { return "grpo"; }
  double units(const TensorBatch& batch) const override;
  double token_units(const TensorBatch& batch) const override { return static_cast<double>(batch.target_tokens); }
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::string> per_token_metrics() const override { return metric_names(); }

 private:
  ObjectiveOptions options_;
};

}  // namespace ctune::train
