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
// clip_ratio/high_mean, clip_ratio/region_mean (TRL's names). Its kind (train/objective/kind.h:
// its keys and reward.*, its batches sampled by train/objective/rollout.h) is in grpo_kind.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/objective/reward_spec.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name grpo's keys (objective.* and reward.*; docs/objectives.md#grpo), TRL's
// GRPOConfig names and defaults where it has them.
struct GrpoOptions : KindOptions {
  double beta = 0.0;                    // the KL penalty's weight (TRL's default: 0, no reference)
  std::int64_t num_generations = 8;     // completions sampled per prompt (a group)
  double temperature = 1.0;             // sampling, and the log-probabilities' logit scale
  double top_p = 1.0;
  std::int64_t top_k = 0;               // 0: off
  std::int64_t max_new_tokens = 256;    // TRL's max_completion_length
  std::vector<std::string> stop;        // text stop strings
  double epsilon = 0.2;                 // the ratio's clip below 1 (and above, unless epsilon_high)
  double epsilon_high = 0.0;            // 0: epsilon (DAPO's clip-higher when larger)
  std::string scale_rewards = "group";  // group | batch | none
  std::string aggregation = "token";    // sequence (GRPO) | token (DAPO, TRL's default) | fixed (Dr. GRPO)
  std::int64_t num_iterations = 1;      // optimisation passes over one generation batch
  bool mask_truncated = false;          // completions cut by max_new_tokens train nothing (DAPO)
  std::string share_prompt = "auto";    // a group trained as one row after one prompt copy: auto | always | never
  std::vector<RewardSpec> rewards;      // summed with their weights
};

// Advantages from the summed rewards of consecutive groups of `group` rows: reward minus its
// group's mean, divided by (std + 1e-4) where std is the group's (`group`), the whole batch's
// (`batch`) or not at all (`none`); std with Bessel's correction, as TRL's nanstd. float64 [rows].
at::Tensor group_advantages(const at::Tensor& rewards, std::int64_t group, const std::string& scale);

class GrpoObjective : public Objective {
 public:
  explicit GrpoObjective(const GrpoOptions& options);
  std::string name() const override { return "grpo"; }
  double units(const TensorBatch& batch) const override;
  double token_units(const TensorBatch& batch) const override { return static_cast<double>(batch.target_tokens); }
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::string> per_token_metrics() const override { return metric_names(); }

 private:
  GrpoOptions options_;
};

}  // namespace ctune::train
