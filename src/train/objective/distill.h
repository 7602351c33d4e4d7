// On-policy distillation (objective.name: distill) with TRL's GKDTrainer semantics (Agarwal et
// al. 2024, "On-policy distillation of language models"; docs/objectives.md#distillation): a
// student (the trained model) learns a frozen teacher's per-token distribution. Each
// micro-batch is, with probability lmbda, the student's own completions of the data's prompts
// (on-policy; train/objective/distill_source.h samples them), else the data's completions
// (supervised KD), or with seq_kd the teacher's. The loss per completion token is the
// generalized Jensen-Shannon divergence between the two next-token distributions over the whole
// vocabulary (train/step/chunked_loss.h chunked_jsd_sum: beta 0 forward KL, 1 reverse KL),
// summed over the step's completion tokens (the unit), neither model's logits ever held for
// the whole batch at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name distill's keys, TRL 1.9's GKDConfig names and defaults.
struct DistillOptions : KindOptions {
  TeacherOptions teacher;             // objective.teacher.{path, dtype, quantize}
  double beta = 0.5;                  // objective.beta: the divergence's interpolation, in [0, 1]
  double lmbda = 0.5;                 // objective.lmbda: the fraction of on-policy micro-batches
  bool seq_kd = false;                // objective.seq_kd: the other micro-batches' completions sampled by the teacher
  double temperature = 0.9;           // sampling (the loss compares the distributions at temperature 1, as GKD's)
  double top_p = 1.0;
  std::int64_t top_k = 0;             // 0: off
  std::int64_t max_new_tokens = 128;  // a sampled completion's longest
  std::vector<std::string> stop;      // text stop strings
};

class DistillObjective : public Objective {
 public:
  DistillObjective(const DistillOptions& options, model::CausalLM teacher);
  std::string name() const override { return "distill"; }
  double units(const TensorBatch& batch) const override { return static_cast<double>(batch.target_tokens); }
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;

 private:
  DistillOptions options_;
  model::CausalLM teacher_;
};

}  // namespace ctune::train
