// Qwen3.5's linear-attention layer, the Gated DeltaNet (modeling_qwen3_5.py's
// Qwen3_5GatedDeltaNet), under Hugging Face's parameter names (docs/families.md#gated-deltanet):
//   in_proj_qkv [2 Hk Dk + Hv Dv, H]   queries, keys and values, convolved together
//   in_proj_z   [Hv Dv, H]             the output gate
//   in_proj_b   [Hv, H], in_proj_a [Hv, H]   per value head: beta = sigmoid(b),
//                                      g = -exp(A_log) softplus(a + dt_bias) (fp32)
//   conv1d.weight [C, 1, K]            depthwise causal convolution, then SiLU
//   dt_bias [Hv], A_log [Hv]
//   norm.weight [Dv]                   RMSNorm of each head's output, times w, times silu(z)
//   out_proj [H, Hv Dv]
// The recurrence itself is ops::gated_delta_rule (chunked, fp32 state). A packed row's
// documents start afresh in both the convolution and the state; padding tokens enter neither
// (their hidden states are zeroed first, as transformers does).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/layers.h"

namespace ctune::model {

// The depthwise convolution's weight [C, 1, K] under conv1d.weight (nn.Conv1d's name; no bias).
class DepthwiseConvImpl : public torch::nn::Module {
 public:
  DepthwiseConvImpl(std::int64_t channels, std::int64_t kernel, at::ScalarType dtype);
  at::Tensor weight;
};
TORCH_MODULE(DepthwiseConv);

class GatedDeltaNetImpl : public torch::nn::Module {
 public:
  GatedDeltaNetImpl(const ModelConfig& config, at::ScalarType dtype);
  // x: [B, T, H]. starts: [B, T] bool, true at a packed document's first token (undefined: one
  // document per row). token_mask: [B, T], 0 on padding (undefined: no padding). With a cache
  // the convolution and the state continue from it and it is advanced by T positions.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& starts, const at::Tensor& token_mask,
                     LayerCache* cache = nullptr);
  // What forward keeps for backward (model/activation_cost.h).
  static ActivationCost saved_activations(const ModelConfig& config, const ActivationShape& shape);
  // Bytes of one row's decoding state: the convolution's last K-1 inputs (compute dtype,
  // `element` bytes) and the fp32 recurrent state, whatever the context length.
  static Term state_bytes(const LinearAttention& linear, const Term& element);

  LinearAttention dims;
  double eps;
  Linear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr}, out_proj{nullptr};
  DepthwiseConv conv1d{nullptr};
  at::Tensor dt_bias, A_log;
  RMSNorm norm{nullptr};  // plain w (not 1 + w), whatever the family's other norms
};
TORCH_MODULE(GatedDeltaNet);

}  // namespace ctune::model
