// Online RL's evaluation (objective.name: grpo with data.eval or data.eval_fraction;
// docs/objectives.md#evaluation). At each evaluation every eval prompt gets num_generations
// completions sampled from the current policy, scored by the run's reward functions and laid out
// as training batches (train/objective/rollout.h does all three); the trainer computes the
// objective over them (eval_loss, eval_kl, eval_entropy, ...) and reports these figures beside
// it: eval_reward, eval_reward_std, eval_rewards/NAME/mean, eval_frac_reward_zero_std,
// eval_completions/mean_length, max_length and clipped_ratio, as TRL names them. The sampling
// seeds are the same at every evaluation, so two evaluations differ by the policy, not by the
// draw. The prompts go in generation batches of the training step's size (grad_accum x
// batch_size prompts, split over the ranks as training's are), so evaluating needs no more
// memory than a step; the figures are averaged over those batches by their completions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "train/objective/rollout.h"

namespace ctune::train {

class RolloutEval : public EvalSource {
 public:
  // `options` as the training rollouts' (its seed the run's); `prompts` the eval split, in the
  // order `sampler` (not shuffled) batches them; `max_batches` of batch_size prompts at most
  // (training.eval_batches; -1: all).
  RolloutEval(model::CausalLM policy, model::CausalLM reference, data::Examples prompts,
              std::shared_ptr<const std::vector<OrderedJson>> records, const tok::Tokenizer& tokenizer, RolloutOptions options,
              data::SamplerOptions sampler, std::int64_t max_batches);

  std::vector<TensorBatch> batches() override;
  std::vector<std::pair<std::string, double>> figures() const override { return figures_; }

 private:
  model::CausalLM policy_, reference_;
  data::Examples prompts_;
  std::shared_ptr<const std::vector<OrderedJson>> records_;
  const tok::Tokenizer& tokenizer_;
  RolloutOptions options_;
  data::SamplerOptions sampler_;
  std::int64_t max_batches_;
  std::vector<std::pair<std::string, double>> figures_;
};

}  // namespace ctune::train
