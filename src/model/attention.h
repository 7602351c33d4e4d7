// Grouped-query self-attention, configured by the Architecture (model/config.h): q/k/v/o
// projections with optional biases, optional per-head RMSNorm of q and k (Qwen3, Gemma 3),
// rotary embeddings on q and k, each KV head shared by kv_groups consecutive query heads, the
// scores' scale and soft-cap (Gemma), causal + padding + window mask, softmax in fp32 (with
// gpt-oss's per-head sink logit in its denominator), and Qwen3.5's output gate.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/config.h"
#include "model/layers.h"
#include "ops/attention.h"

namespace ctune::model {

// Keys and values of the positions seen so far, for incremental decoding: one buffer each of
// [B, nkv, capacity, d] (KV heads only, after RoPE), allocated at the first step in the
// projections' dtype on their device and filled up to `length`. Appending writes in place, so
// a step costs its own tokens, not a copy of everything before them.
// A Gated DeltaNet layer (model/gated_deltanet.h) keeps instead its convolution's last K-1
// inputs [B, C, K-1] and its fp32 recurrent state [B, Hv, Dk, Dv]: the same size at every length.
struct LayerCache {
  at::Tensor k, v;
  at::Tensor conv_state, recurrent_state;  // a DeltaNet layer's
  std::int64_t length = 0;
  std::int64_t capacity = 0;
  // Writes [B, nkv, T, d] at positions length .. length + T - 1 and returns every position's
  // keys and values so far (views of the buffers). Throws when the capacity is exceeded.
  std::pair<at::Tensor, at::Tensor> append(const at::Tensor& k_new, const at::Tensor& v_new);
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, at::ScalarType dtype);

  // x: [B, T, H]; cos/sin: [B, T, d]; mask: [B, 1, T, T_past + T] bool, true = may attend.
  // With a cache, the new keys/values are appended to it and attention covers all of them.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask,
                     LayerCache* cache = nullptr);
  // What forward keeps for backward (model/activation_cost.h): the projections' inputs, q/k
  // norms, the scores (materialized) or a block's workspace (blocked), q, k, v, o's input.
  static ActivationCost saved_activations(const ModelConfig& config, const ActivationShape& shape);

  std::int64_t num_heads, num_kv_heads, head_dim;
  double scale;    // ModelConfig::attention_scale
  double softcap;  // Architecture::attn_softcap (0: none)
  ops::AttentionKernel kernel = ops::AttentionKernel::blocked;  // RecomputePolicy::attention_kernel
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear qkv_proj{nullptr};  // Architecture::fused_qkv: [q; k; v] rows, instead of the three
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Architecture::qk_norm only
  bool use_rope = true;                       // Architecture::rope(layer): false in a NoPE layer
  bool output_gate = false;                   // Architecture::attn_output_gate
  at::Tensor sinks;                           // Architecture::attention_sinks: [heads], else undefined
};
TORCH_MODULE(Attention);

// Bool mask [B, 1, Tq, Tk] for queries at positions Tk-Tq .. Tk-1 over keys 0 .. Tk-1: causal;
// keys where key_mask [B, Tk] is 0 (padding) hidden; with segment_ids [B, T] (Tq == Tk; packed
// documents, 0 = padding) a query sees only keys of its own segment, and with prefix_ids [B, T]
// also those of the segment its own continues (a shared prompt; 0: none); with a window w > 0
// only the w most recent positions, itself included (q - k < w, as transformers' sliding
// masks), counted in position_ids [B, T] when given with segments (a segment after a shared
// prefix does not start where its positions do), else in the row.
at::Tensor build_attention_mask(std::int64_t batch, std::int64_t query_length, std::int64_t key_length,
                                const at::Tensor& key_mask, const at::Tensor& segment_ids, const at::Device& device,
                                std::int64_t window = 0, const at::Tensor& prefix_ids = {}, const at::Tensor& position_ids = {});

}  // namespace ctune::model
