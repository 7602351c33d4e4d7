// Next-token cross-entropy for causal LM training: position t predicts labels[t+1]; positions
// whose target is -100 (prompt, padding, document starts) cost nothing and are not even
// projected to the vocabulary. Returned as a sum, so gradient accumulation can normalise by the
// whole step's target count (token-correct accumulation).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "data/example.h"  // data::kIgnoreIndex marks the positions that are not targets
#include "model/decoder.h"

namespace ctune::train {

// A training batch as tensors (see data::Batch): all [B, T] int64 except segment_ids (int32).
struct TensorBatch {
  at::Tensor input_ids, labels, position_ids, segment_ids;
  std::int64_t target_tokens = 0;
  // Consecutive rows that belong together (data::Batch::rows_per_group): 2 for preference pairs.
  std::int64_t rows_per_group = 1;
  // Per row, its example's index in its split (data::Batch::examples; -1 packed), and the split:
  // what precomputed reference log-probabilities are looked up by (train/objective/reference_table.h).
  std::vector<std::int64_t> examples = {};
  bool eval_split = false;
  // Per row, data::Batch::desirable: an unpaired record's label (1 desirable, 0 not), -1 elsewhere.
  std::vector<std::int8_t> desirable = {};
  // Online RL (train/objective/rollout.h): per row its advantage ([B], float64), and per target
  // (in row-major order of the labels' targets, [N]) its log-probability under the policy that
  // generated it and under the reference; undefined when the objective does not need them.
  at::Tensor advantages = {}, old_logps = {}, ref_logps = {};
  // A group's completions after one copy of their prompt (train/objective/shared_prompt.h):
  // per position the segment it continues ([B, T] int32, the model's ForwardInputs::prefix_ids)
  // and the sequence it belongs to ([B, T] int64, what per-sequence sums and advantages index);
  // undefined: a row is one sequence.
  at::Tensor prefix_ids = {}, sequence_ids = {};
};

// The model's inputs for a training or evaluation forward over `batch`. A model with experts in
// training mode also gets the routers' mask: position t counts for their auxiliary losses when
// label t + 1 is a target (the last position never is), the tokens the loss counts.
model::ForwardInputs forward_inputs(model::CausalLM& model, const TensorBatch& batch);

// Sum of -log p(label[t+1] | ..t) over targeted positions, in fp32. With `chunked` (and a head
// that is a plain matrix: tied embeddings or an lm_head without adapter or bias) the logits
// are never materialised for all positions at once (chunked_loss.h).
at::Tensor next_token_loss_sum(model::CausalLM& model, const TensorBatch& batch, bool chunked = true);

// After a training forward of next_token_loss_sum: the sparse layers' auxiliary load-balancing
// loss and router z-loss over the tokens the main loss counts (model/moe.h RouterRecord), armed
// so the coming backward adds `aux_weight` and `z_weight` times their gradients. Zeros, arming
// nothing, for a model without experts.
struct RouterLosses {
  double aux = 0, z = 0;
};
RouterLosses router_losses(model::CausalLM& model, double aux_weight, double z_weight);
// Per sparse layer, the share of routed tokens each expert got in that forward.
std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load(model::CausalLM& model);

}  // namespace ctune::train
