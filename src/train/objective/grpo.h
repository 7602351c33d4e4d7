// Group relative policy optimisation (Shao et al. 2024) and its 2025-26 variants with TRL 1.9's
// GRPOTrainer semantics (docs/objectives.md#grpo): the loss of a batch of sampled completions, each
// row a prompt and one of its completions (the completion's tokens the targets), with the row's
// advantage and, per target, the log-probabilities of the policy that sampled it (old) and of the
// reference (train/objective/rollout.h fills them). Per target token, with the importance weight
// w = exp(logp - old) (importance_sampling_level token) or exp(mean over the completion of
// logp - old) (sequence: GSPO):
//   grpo family  loss_t = -min(min(w, delta) A, clip(w, 1 - epsilon, 1 + epsilon_high) A)
//   cispo        loss_t = -sg(min(w, epsilon_high)) A logp
// plus beta k3_t, k3_t = exp(ref - logp) - (ref - logp) - 1, and only on the tokens whose entropy
// is in the top top_entropy_quantile of the micro-batch's, minus entropy_coef times the mean
// entropy of those tokens (TRL's entropy bonus: over the step's tokens for dapo and cispo, else
// each micro-batch's mean), aggregated by loss_type as
//   grpo     mean over rows of each row's mean over its tokens          units: rows
//   bnpo     the micro-batch's token mean, per row                      units: rows
//   dr_grpo  sum over tokens / (rows x max_new_tokens)                  units: rows
//   dapo, cispo  sum over tokens / the step's completion tokens         units: tokens
// logp at the sampling temperature. Metrics: kl, entropy per completion token; clip_ratio/low_mean,
// clip_ratio/high_mean, clip_ratio/region_mean (cispo: cispo_clip_ratio) per token, or per
// completion at the sequence level (TRL's names and means). Its kind (train/objective/kind.h:
// its keys and reward.*, its batches sampled by train/objective/rollout.h) is in grpo_kind.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/objective/logps.h"
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
  std::string loss_type = "dapo";       // grpo | dr_grpo | dapo (TRL's default) | bnpo | cispo
  std::string importance_sampling_level = "token";  // token | sequence (GSPO)
  double delta = 0.0;                   // 0: off; else the unclipped weight's cap (two-sided clipping)
  double top_entropy_quantile = 1.0;    // train only the tokens in this top fraction of entropies
  double entropy_coef = 0.0;            // the entropy bonus: minus this times the mean entropy of the trained tokens
  std::string multi_objective_aggregation = "sum_then_normalize";  // | normalize_then_sum
  std::int64_t num_iterations = 1;      // optimisation passes over one generation batch
  bool mask_truncated_completions = false;  // completions cut by max_new_tokens train nothing (DAPO)
  // objective.name rloo (TRL's RLOOTrainer; docs/objectives.md#rloo): the baseline each
  // completion's group siblings' mean reward, beta's KL a penalty on the reward (not a loss
  // term), one importance weight per completion from its summed log-ratio, the loss the mean
  // over completions.
  bool leave_one_out = false;
  bool normalize_advantages = false;    // rloo: the advantages standardised over the batch
  std::string share_prompt = "auto";    // a group trained as one row after one prompt copy: auto | always | never
  std::vector<RewardSpec> rewards;      // summed with their weights
};

// objective.loss_type's values under grpo (TRL's names), in the order the messages list them.
inline bool is_grpo_loss_type(const std::string& t) {
  return t == "grpo" || t == "bnpo" || t == "dr_grpo" || t == "dapo" || t == "cispo";
}

// Advantages from the summed rewards of consecutive groups of `group` rows: reward minus its
// group's mean, divided by (std + 1e-4) where std is the group's (`group`), the whole batch's
// (`batch`) or not at all (`none`); std with Bessel's correction, as TRL's nanstd. float64 [rows].
at::Tensor group_advantages(const at::Tensor& rewards, std::int64_t group, const std::string& scale);
// multi_objective_aggregation normalize_then_sum: each reward function's scores ([rows, F])
// normalised within their groups (mean and std, + 1e-4), summed with `weights` [F], then the sums
// normalised over the whole batch; scale_rewards does not apply (as TRL). float64 [rows].
at::Tensor normalized_sum_advantages(const at::Tensor& scores, const at::Tensor& weights, std::int64_t group);

// RLOO's advantages: each reward minus the mean of its group's other rewards, then, when
// `normalize`, (a - mean) / (std + 1e-4) over the whole batch (std with Bessel's correction).
// `rewards` already carry the KL penalty. float64 [rows].
at::Tensor leave_one_out_advantages(const at::Tensor& rewards, std::int64_t group, bool normalize);

class GrpoObjective : public Objective {
 public:
  explicit GrpoObjective(const GrpoOptions& options);
  std::string name() const override { return options_.leave_one_out ? "rloo" : "grpo"; }
  double units(const TensorBatch& batch) const override;
  double token_units(const TensorBatch& batch) const override { return static_cast<double>(batch.target_tokens); }
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::pair<std::string, double>> means(const std::vector<double>& sums, double units, double token_units) const override;

 private:
  ObjectiveTerms rloo_forward(const TokenLogps& lp, const TensorBatch& batch) const;
  at::Tensor entropy_bonus(model::CausalLM& policy, const at::Tensor& hidden, const TensorBatch& batch, const at::Tensor& trained) const;
  std::vector<double> metric_sums(const at::Tensor& weight, const at::Tensor& adv, const at::Tensor& kl, const TokenLogps& lp,
                                  const at::Tensor& tokens_per_row, double lo, double hi, double eps_high) const;

  GrpoOptions options_;
};

}  // namespace ctune::train
