// Rotary position embeddings in Hugging Face's rotate-half convention: element j of a head
// pairs with element j + d/2. Frequencies follow rope_theta, head_dim and rope_scaling
// (linear, llama3); see docs/formats.md#rope.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"

namespace ctune::model {

// inv_freq: [head_dim / 2] fp32, after rope scaling: of config.rope, or of `rope` for heads of `head_dim`.
at::Tensor rope_inv_freq(const ModelConfig& config);
at::Tensor rope_inv_freq(const RopeConfig& rope, std::int64_t head_dim);

// longrope's frequencies past original_max_position (long_factor); undefined for other types.
at::Tensor rope_long_inv_freq(const RopeConfig& rope, std::int64_t head_dim);

// cos, sin: [B, T, rotary_dim] for position_ids [B, T], times `scale` (longrope's attention
// factor). Computed in fp32 and rounded to `dtype` (the residual stream's, as Hugging Face casts
// them), held in fp32 (float64 for float64): the form ops/fused_rope.h reads.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& position_ids,
                                               at::ScalarType dtype, double scale = 1.0);

}  // namespace ctune::model
