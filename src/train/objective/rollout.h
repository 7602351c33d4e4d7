// The generation half of online RL (objective.name: grpo; docs/objectives.md#grpo), as the
// trainer's batch source. At the first micro-batch of a generation batch it takes the step's
// prompt batches from the sampler (grad_accum of them, batch_size prompts each), samples
// num_generations completions of every prompt from the current policy with the generation engine
// (infer/generate.h: one call, every prompt's copies consecutive, seeded per generation batch),
// scores them with the reward functions, turns the rewards into advantages within each group,
// and builds one training batch per prompt batch: row = prompt + completion, the completion's
// tokens (its stop token included, as Hugging Face's generate keeps eos) the targets. With
// num_iterations > 1 the policy's log-probabilities at generation are kept (old_logps) and the
// same batches serve num_iterations steps; with beta > 0 the reference's are computed then too.
// objective.name rloo (GrpoOptions::leave_one_out) keeps old_logps always, and with beta > 0
// takes each completion's KL from them into its reward before the leave-one-out advantages.
//
// Several ranks: each global prompt batch is split by prompts (a group is never split); each
// rank samples, scores and trains its share, every prompt's copies drawing from the sampling
// streams they have in one process (their row in the whole generation batch), so N ranks sample
// what one process does. The rewards, lengths and scores are then summed over the ranks into
// the whole batch's (each rank fills its own rows; adding zeros is exact), so the advantages
// (also scale_rewards: batch) and the step's figures are the global ones. A rank left without
// prompts trains on idle batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/sampler.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"
#include "train/objective/grpo.h"
#include "train/objective/rewards.h"
#include "train/step/trainer.h"

namespace ctune::train {

struct RolloutOptions {
  GrpoOptions objective;
  std::int64_t grad_accum = 1;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> stop_ids;  // eos and end-of-turn ids
  std::int64_t pad_id = 0;
  at::Device device = at::kCPU;
  std::int64_t first_step = 0;  // steps already done (a resumed run): where the generation count starts
  int rank = 0, ranks = 1;
  StepSync* sync = nullptr;  // sums over the ranks (null: one process)
  // Runs its argument with the policy whole for the whole call (full_shard gathers it once, so
  // the ranks' generation loops, which end at different steps, issue no collectives).
  std::function<void(const std::function<void()>&)> with_whole_model;
};

class RolloutSource : public BatchSource {
 public:
  // `reference` null: the policy with its adapters off (LoRA), or none when beta is 0.
  // `records`: the prompts' records by Example::record (data::Datasets::train_records).
  RolloutSource(model::CausalLM policy, model::CausalLM reference, data::Sampler& prompts, data::Examples examples,
                std::shared_ptr<const std::vector<OrderedJson>> records, const tok::Tokenizer& tokenizer, RolloutOptions options);

  TensorBatch next() override;
  std::vector<std::pair<std::string, double>> figures() const override { return figures_; }
  // Inside a generation batch of num_iterations > 1 steps: its training batches (with their
  // advantages and kept log-probabilities), its figures, samples and seed; else nothing.
  SourceState state() const override;
  void restore(const SourceState& state) override;
  // The latest generation batch's first `groups` prompts with their completions and rewards,
  // and the seed it sampled with: {"seed", "groups": [{"prompt", "completions": [...]}]}.
  Json samples(std::int64_t groups) const;
  // The seed generation batch `index` (0-based; it starts at step index x num_iterations) samples
  // with: a run's batches draw distinct, reproducible streams.
  static std::uint64_t generation_seed(std::uint64_t seed, std::int64_t index);

 private:
  // generate_batch's parts (rollout.cpp), in its order.
  struct Sample;       // one sampled completion and what it scored
  struct Prompts;      // the generation batch's prompts: this rank's, each G times
  struct RewardTable;  // the whole generation batch's per-row rewards, scores and lengths
  void generate_batch();
  Prompts take_prompts();
  std::vector<Sample> sample(const Prompts& prompts);
  std::vector<std::string> score(const Prompts& prompts, std::vector<Sample>& samples);
  RewardTable reward_table(const Prompts& prompts, const std::vector<Sample>& samples) const;
  std::vector<double> rank_advantages(const RewardTable& table, const std::vector<double>& kl, const Prompts& prompts,
                                      const std::vector<Sample>& samples);
  std::string overflow_note(const std::vector<double>& rewards, const double* advantages, const std::vector<std::uint64_t>& streams,
                            const std::vector<Sample>& samples) const;
  void make_batches(const Prompts& prompts, const std::vector<Sample>& samples);
  TensorBatch training_batch(const Sample* rows, std::int64_t n) const;
  std::vector<double> keep_logps(const Prompts& prompts);
  void set_advantages(const std::vector<double>& advantages);
  void report(const RewardTable& table, const std::vector<Sample>& samples, double generation_s, double scoring_s);
  void keep_samples(const std::vector<std::string>& prompt_texts, const std::vector<Sample>& samples,
                    const std::vector<double>& advantages);
  std::string decode(const std::vector<std::int64_t>& ids) const;

  model::CausalLM policy_, reference_;
  data::Sampler& prompts_;
  data::Examples examples_;
  std::shared_ptr<const std::vector<OrderedJson>> records_;
  const tok::Tokenizer& tokenizer_;
  RolloutOptions options_;
  std::vector<std::unique_ptr<RewardFunction>> rewards_;
  std::vector<TensorBatch> batches_;
  std::size_t next_ = 0;
  std::int64_t pass_ = 0, generation_ = 0;
  std::uint64_t last_seed_ = 0;
  std::vector<std::pair<std::string, double>> figures_;
  Json samples_ = Json::array();
  bool warned_overflow_ = false;  // a group's rewards overflowed their spread (rollout.cpp, overflow_note)
};

}  // namespace ctune::train
