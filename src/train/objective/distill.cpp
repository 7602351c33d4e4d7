#include "train/objective/distill.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include "ops/profile_regions.h"
#include "train/objective/logps.h"
#include "train/step/chunked_loss.h"

namespace ctune::train {
DistillObjective::DistillObjective(const DistillOptions& options, model::CausalLM teacher)
    : options_(options), teacher_(std::move(teacher)) {
  if (!teacher_) throw std::logic_error("distill: no teacher was built");
}

ObjectiveTerms DistillObjective::forward(model::CausalLM& lm, const TensorBatch& b) {
  const auto hidden = policy_hidden(lm, b);
  const auto acc = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto h = target_hidden(hidden, b.labels);
  if (h.size(0) == 0) return {(hidden.sum() * 0.0).to(acc), {}};  // keeps the graph connected (an idle batch)
  RECORD_USER_SCOPE(ops::region::kLoss);
  at::Tensor teacher_hidden;
  {
    // The teacher's final hidden states at the same positions; its logits a chunk at a time.
    at::NoGradGuard no_grad;
    teacher_hidden = target_hidden(teacher_->hidden(forward_inputs(teacher_, b)), b.labels);
    teacher_->model->scopes->release_all();
  }
  const TeacherLogits teacher_logits = [&](std::int64_t start, std::int64_t rows) {
    at::NoGradGuard no_grad;
    return teacher_->head(teacher_hidden.narrow(0, start, rows)).to(acc);
  };
  at::Tensor loss;
  if (const at::Tensor* weight = plain_head_weight(lm)) {
    loss = chunked_jsd_sum(h, *weight, teacher_logits, options_.beta, 0, lm->compute_dtype(), lm->config().arch.final_softcap);
  } else {
    // A head with an adapter or a bias: autograd over each chunk of its logits.
    const auto n = h.size(0), chunk = default_chunk_rows(lm->config().vocab_size, 8);
    for (std::int64_t start = 0; start < n; start += chunk) {
      const auto rows = std::min(chunk, n - start);
      at::Tensor part;
      jsd_rows(lm->head(h.narrow(0, start, rows)).to(acc), teacher_logits(start, rows), options_.beta, &part, nullptr);
      loss = loss.defined() ? loss + part.sum() : part.sum();
    }
  }
  return {loss, {}};
}

}  // namespace ctune::train
