// Grouped-query self-attention (Llama/Mistral/Qwen2): q/k/v/o projections with optional
// biases, rotary embeddings on q and k, each KV head shared by kv_groups consecutive query
// heads, causal + padding mask, softmax in fp32.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/config.h"
#include "model/layers.h"

namespace ctune::model {

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, at::ScalarType dtype);

  // x: [B, T, H]; cos/sin: [B, T, d]; mask: [B, 1, T, T] bool, true = may attend.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask);

  std::int64_t num_heads, num_kv_heads, head_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(Attention);

// Bool mask [B, 1, T, T]: causal, and keys at padding positions (attention_mask == 0) hidden.
at::Tensor build_attention_mask(std::int64_t batch, std::int64_t length, const at::Tensor& attention_mask,
                                const at::Device& device);

}  // namespace ctune::model
