#include "train/step/loss.h"

#include <ATen/record_function.h>

#include "ops/profile_regions.h"
#include "train/step/chunked_loss.h"

namespace ctune::train {

model::ForwardInputs forward_inputs(model::CausalLM& lm, const TensorBatch& b) {
  model::ForwardInputs in;
  in.input_ids = b.input_ids;
  in.position_ids = b.position_ids;
  in.segment_ids = b.segment_ids;
  in.prefix_ids = b.prefix_ids;
  if (lm->model->router_record && lm->is_training() && b.labels.size(1) >= 2) {
    const auto T = b.labels.size(1);
    in.router_mask = at::cat({b.labels.narrow(1, 1, T - 1) != data::kIgnoreIndex,
                              at::zeros({b.labels.size(0), 1}, b.labels.options().dtype(at::kBool))}, 1);
  }
  return in;
}

at::Tensor next_token_loss_sum(model::CausalLM& lm, const TensorBatch& b, bool chunked) {
  const model::ForwardInputs in = forward_inputs(lm, b);
  auto hidden = lm->hidden(in);  // [B, T, H]
  RECORD_USER_SCOPE(ops::region::kLoss);
  const auto B = hidden.size(0), T = hidden.size(1), H = hidden.size(2);
  if (T < 2) return hidden.sum() * 0.0;  // keeps the graph connected for backward
  auto h = hidden.narrow(1, 0, T - 1).reshape({B * (T - 1), H});
  auto targets = b.labels.narrow(1, 1, T - 1).reshape({B * (T - 1)});
  auto keep = (targets != data::kIgnoreIndex).nonzero().squeeze(1);
  h = h.index_select(0, keep);
  targets = targets.index_select(0, keep);
  if (chunked) {
    const bool plain_head = !lm->lm_head || (!lm->lm_head->adapter && !lm->lm_head->bias.defined());
    if (plain_head) {
      const auto& weight = lm->lm_head ? lm->lm_head->weight : lm->model->embed_tokens->weight;
      return chunked_cross_entropy_sum(h, weight, targets, 0, lm->compute_dtype(), lm->config().arch.final_softcap);
    }
  }
  auto logits = lm->head(h).to(at::kFloat);  // [N, V]
  return at::nll_loss(at::log_softmax(logits, -1), targets, {}, at::Reduction::Sum);
}

RouterLosses router_losses(model::CausalLM& lm, double aux_weight, double z_weight) {
  const auto& record = lm->model->router_record;
  if (!record || !record->recording()) return {};
  record->arm(aux_weight, z_weight);
  return {record->aux_loss(), record->z_loss()};
}

std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load(model::CausalLM& lm) {
  const auto& record = lm->model->router_record;
  return record && record->recording() ? record->expert_load() : std::vector<std::pair<std::int64_t, std::vector<double>>>{};
}

}  // namespace ctune::train
