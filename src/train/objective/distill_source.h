// On-policy distillation's batches (objective.name: distill; docs/objectives.md#distillation), as
// the trainer's batch source. Each micro-batch is the data's next batch; with probability lmbda
// (one draw per micro-batch, from the run's seed and the micro-batch's index in the run, so a
// resumed run and every rank draw alike) its completions are replaced by the student's own,
// sampled with the generation engine from each example's prompt (everything before its last
// trained span: the last assistant turn, as GKD's collator splits a conversation), the sampled
// tokens and the stop token that ended them the targets. With seq_kd the other micro-batches
// are sampled by the teacher instead of taken from the data (sequence-level KD). A micro-batch's
// samples draw the streams of their rows in the global batch, seeded per micro-batch, so N ranks
// sample what one process does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"
#include "train/objective/distill.h"
#include "train/step/trainer.h"

namespace ctune::train {

struct DistillSourceOptions {
  DistillOptions objective;
  std::int64_t grad_accum = 1;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> stop_ids;  // eos and end-of-turn ids
  std::int64_t pad_id = 0;
  at::Device device = at::kCPU;
  std::int64_t first_step = 0;  // steps already done (a resumed run): where the micro-batch count starts
  int rank = 0, ranks = 1;
  // Runs its argument with the student whole (full_shard gathers it once for the whole call).
  std::function<void(const std::function<void()>&)> with_whole_model;
};

class DistillSource : public BatchSource {
 public:
  DistillSource(model::CausalLM student, model::CausalLM teacher, data::Sampler& sampler, data::Examples examples,
                const tok::Tokenizer& tokenizer, DistillSourceOptions options);

  TensorBatch next() override;
  // The step's on_policy fraction of micro-batches, and its sampled completions' figures
  // (completions/mean_length, completions/clipped_ratio, time/generation_s; this rank's).
  std::vector<std::pair<std::string, double>> figures() const override;
  // Whether micro-batch `index` of a run (0-based over its steps' micro-batches) is on-policy.
  static bool on_policy(std::uint64_t seed, std::int64_t index, double lmbda);
  // Each example's prompt: its ids before its last trained span.
  static std::vector<std::int32_t> prompt_of(const data::Example& example);

 private:
  TensorBatch sampled(model::CausalLM& model, const data::Batch& all, std::int64_t begin, std::int64_t end, std::int64_t index,
                      bool student);
  std::string decode(const std::vector<std::int64_t>& ids) const;

  model::CausalLM student_, teacher_;
  data::Sampler& sampler_;
  data::Examples examples_;
  const tok::Tokenizer& tokenizer_;
  DistillSourceOptions options_;
  std::int64_t index_ = 0;  // the next micro-batch's in the run
  // The current step's: micro-batches, those on-policy, sampled rows, their tokens, those cut by
  // max_new_tokens, generation seconds.
  double micro_ = 0, on_ = 0, rows_ = 0, tokens_ = 0, clipped_ = 0, seconds_ = 0;
};

}  // namespace ctune::train
