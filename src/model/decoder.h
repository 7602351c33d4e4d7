// The shared decoder every family builds (model/family.h: what varies is data) as torch::nn
// modules whose parameter names are exactly Hugging Face's (model.layers.0.self_attn.q_proj.weight),
// so checkpoints map one to one.
#pragma once

#include <functional>
#include <memory>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/gated_deltanet.h"
#include "model/layers.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/param_scopes.h"
#include "model/recompute.h"

namespace ctune::model {

// Keys and values of every layer for incremental decoding (CausalLM::new_cache).
struct KVCache {
  // Its bytes: K and V of each of `layers`, [rows, KV heads, positions, head dim] each, in
  // `element`-byte values; as a ledger term, which the memory ledgers print
  // (train/forecast/memory_ledger.h) and CausalLM::cache_bytes evaluates.
  static Term bytes(const Term& layers, const Term& kv_heads, const Term& head_dim, const Term& positions, const Term& rows,
                    const Term& element);
  // The whole cache of `config`'s model, its L layers given as `layers`: K and V of the attention
  // layers, and each Gated DeltaNet layer's fixed state (GatedDeltaNetImpl::state_bytes), which
  // does not grow with the positions.
  static Term model_bytes(const ModelConfig& config, const Term& layers, const Term& kv_heads, const Term& head_dim,
                          const Term& positions, const Term& rows, const Term& element);

  std::vector<LayerCache> layers;
  std::int64_t length() const { return layers.empty() ? 0 : layers[0].length; }
  // Row r takes what row rows[r] holds (beam search's beams moving): in the same buffers, or in
  // new ones when `rows` is shorter (the beams of finished prompts dropped) or longer (a prompt
  // prefilled once, copied to each of its samples).
  void select_rows(const at::Tensor& rows);
};

// What one forward pass sees.
struct ForwardInputs {
  at::Tensor input_ids;       // [B, T] int64
  at::Tensor attention_mask;  // [B, T_past + T]: 1 token, 0 padding (optional)
  at::Tensor position_ids;    // [B, T] (optional: derived from the mask or the cache length)
  // [B, T], 1 where a token counts in the loss: a training forward's mask for the routers'
  // auxiliary loss (RouterRecord). Undefined: nothing recorded.
  at::Tensor router_mask;
  at::Tensor segment_ids;     // [B, T] packed documents, 0 = padding (optional; not with a cache)
  // [B, T] with segment_ids: the segment a token's segment continues (a prompt shared by the
  // completions after it, train/objective/shared_prompt.h), whose keys it also sees; 0 none.
  at::Tensor prefix_ids;
  KVCache* cache = nullptr;   // appended to when given
};

// What each layer of one forward reads besides its input.
struct LayerInputs {
  at::Tensor cos, sin;  // RoPE's, [B, T, rotary dim] (the layer's own under local RoPE)
  at::Tensor mask;      // [B, 1, T, T_past + T] bool, true = may attend (the layer's window)
  // Gated DeltaNet layers: [B, T] bool, true at a packed document's first token (undefined: one
  // document per row); and [B, T], 0 on padding (undefined: none).
  at::Tensor starts, token_mask;
};

// Pre-norm block: h = x + attn(norm(x)); out = h + mlp(norm(h)). A Gated DeltaNet layer
// (Architecture::linear) mixes tokens with linear_attn instead of self_attn. With sandwich norms
// (Gemma): h = x + post_attention_layernorm(attn(input_layernorm(x))),
// out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))). On a sparse layer
// (MoeArchitecture) the MLP is a SparseMoe; both register under the family's names (ModuleNames).
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, at::ScalarType dtype, std::int64_t layer = 0,
                   std::shared_ptr<RouterRecord> record = nullptr);
  // With recompute set (and training, no cache), only x is kept for backward (recompute.h).
  at::Tensor forward(const at::Tensor& x, const LayerInputs& in, LayerCache* cache = nullptr);
  at::Tensor forward_block(const at::Tensor& x, const LayerInputs& in, LayerCache* cache = nullptr);
  // What forward_block keeps for backward without recompute: its norms, attention and MLP
  // (layer `layer`'s: dense or sparse).
  static ActivationCost saved_activations(const ModelConfig& config, const ActivationShape& shape, std::int64_t layer = 0);

  bool recompute = false;
  Attention self_attn{nullptr};           // an attention layer's
  GatedDeltaNet linear_attn{nullptr};     // a Gated DeltaNet layer's
  MLP mlp{nullptr};        // a dense layer's
  SparseMoe moe{nullptr};  // a sparse layer's
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  // sandwich norms only
};
TORCH_MODULE(DecoderLayer);

// Embeddings, blocks and final norm: HF's LlamaModel (the "model." prefix).
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const ModelConfig& config, at::ScalarType dtype);
  // -> final hidden states [B, T, H] (after the last norm). position_ids must be set.
  at::Tensor forward(const ForwardInputs& in);
  // What a forward keeps outside its layers: the final norm's, the head's input, and under
  // blocked attention the masks (one per window its layers use, shared by the layers).
  static Term saved_outside_layers(const ModelConfig& config, const ActivationShape& shape);
  // The Gated DeltaNet layers' inputs: where packed documents start, which tokens are padding.
  static LayerInputs recurrent_inputs(const ForwardInputs& in, std::int64_t T);

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  // Called around the embedding, each block and the final norm (a sharded run's gathers).
  std::shared_ptr<ParamScopes> scopes = std::make_shared<ParamScopes>();
  // [d/2] fp32; not parameters and not saved (HF's non-persistent buffers). local_inv_freq:
  // Architecture::local_rope's, for the layers in local_rope_layers (undefined when none).
  at::Tensor inv_freq, local_inv_freq;
  // longrope: the frequencies a forward uses once its largest position reaches
  // long_from (original_max_position_embeddings), as transformers switches them; and the
  // attention factor on cos and sin.
  at::Tensor long_inv_freq;
  std::int64_t long_from = 0;
  double rope_scale = 1.0;
  std::vector<bool> local_rope_layers;
  std::vector<std::int64_t> windows;  // per layer, Architecture::layer_windows (0: global)
  bool embed_scale = false;           // Architecture::embed_scale
  bool linear_layers = false;         // some layer is a Gated DeltaNet (Architecture::linear)
  // The sparse layers' routing figures of the last training forward (null without MoE layers).
  std::shared_ptr<RouterRecord> router_record;
};
TORCH_MODULE(Decoder);

// Decoder plus the output head (HF's LlamaForCausalLM). With tie_word_embeddings the head
// shares the embedding matrix and has no parameter of its own.
class CausalLMImpl : public torch::nn::Module {
 public:
  CausalLMImpl(ModelConfig config, at::ScalarType dtype);

  // -> logits [B, T, V]. position_ids default to T_past .. T_past+T-1, or to the running count
  // of real tokens when an attention mask marks left padding (as HF generate does).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& position_ids = {});
  at::Tensor logits(ForwardInputs in);
  // Final hidden states [B, T, H]; the loss applies the head itself, in chunks.
  at::Tensor hidden(ForwardInputs in);
  // A KV cache for up to `capacity` positions (prompt and generated tokens) per sequence; its
  // buffers are allocated by the first forward that uses it.
  KVCache new_cache(std::int64_t capacity) const;
  // What that cache's buffers take for `rows` sequences of `positions` each: K and V of every
  // attention layer's KV heads, in the dtype the projections compute in, and each Gated
  // DeltaNet layer's state (GatedDeltaNetImpl::state_bytes).
  std::int64_t cache_bytes(std::int64_t rows, std::int64_t positions) const;
  // Which layers recompute activations in backward (memory.activation_checkpointing).
  void set_recompute(const RecomputePolicy& policy);
  // Runs every matmul (adapters and the head included) in `dtype` (ops/compute.h); Undefined:
  // in each weight's own dtype. Weights keep their storage dtype.
  void set_compute_dtype(at::ScalarType dtype);
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  const ModelConfig& config() const { return config_; }
  // The output head on hidden states [.., H] -> logits [.., V]: lm_head (with its adapter, if
  // any), or the embedding matrix when tied; soft-capped when the family caps logits.
  at::Tensor head(const at::Tensor& hidden);

  Decoder model{nullptr};
  Linear lm_head{nullptr};  // null when tied

 private:
  ModelConfig config_;
  at::ScalarType compute_dtype_ = at::ScalarType::Undefined;
};
TORCH_MODULE(CausalLM);

at::ScalarType parse_dtype(const std::string& name, const std::string& where);
std::string dtype_to_hf(at::ScalarType dtype);  // "float32", "bfloat16", "float16"

}  // namespace ctune::model
