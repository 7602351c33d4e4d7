// Model configuration read from a Hugging Face config.json (torch-free): the dimensions every
// decoder has, read here, and the Architecture, which the config's family reads (model/family.h,
// one file per family in model/families/). Both the v4 (rope_theta/rope_scaling, torch_dtype)
// and v5 (rope_parameters, dtype) spellings. Anything the model cannot honour is refused here,
// with the key and the value, before a tensor is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "model/module_names.h"

namespace ctune::model {

// One projection of a decoder layer: W is [out, in], with a bias or not.
struct ProjectionShape {
  std::int64_t in = 0, out = 0;
  bool bias = false;
};

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | longrope | yarn
  double theta = 10000.0;
  double factor = 1.0;                        // linear, llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  std::int64_t original_max_position = 8192;  // llama3; longrope: where the long factors start
  // longrope (Phi-3): frequencies divided per dimension by short_factor, or by long_factor once a
  // forward's largest position reaches original_max_position; cos and sin times attention_factor.
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;  // longrope, yarn: as given, or derived by parse_model_config
  // yarn (gpt-oss; transformers' _compute_yarn_parameters): frequencies blended between θ^(-2i/d)
  // and θ^(-2i/d) / factor by a ramp over the dimensions whose rotations in
  // original_max_position fall between beta_fast and beta_slow (bounds floored and ceiled with
  // `truncate`); cos and sin times attention_factor (default 0.1 ln factor + 1, or the ratio of
  // the two with mscale / mscale_all_dim). docs/formats.md#rope.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  double mscale = 0, mscale_all_dim = 0;  // 0: absent
  // The leading fraction of each head that rotates (Phi-4-mini: 0.75); the rest passes through.
  double partial_rotary_factor = 1.0;

  std::int64_t rotary_dim(std::int64_t head_dim) const {
    return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  }
};

// The MLP's gate activation: down(act(gate(x)) * up(x)).
enum class Activation {
  silu,       // SwiGLU (Llama, Qwen, Mistral, SmolLM3)
  gelu_tanh,  // GeGLU with tanh-approximated GELU (Gemma: gelu_pytorch_tanh)
};

// Mixture-of-experts MLPs (model/moe.h): a router over the hidden state picks `top_k` of
// `experts` SwiGLU experts per token (docs/families.md#mixture-of-experts).
struct MoeArchitecture {
  std::int64_t experts = 0;       // 0: every layer is dense
  std::int64_t top_k = 0;         // experts per token
  std::int64_t intermediate = 0;  // each expert's (Qwen3-MoE: moe_intermediate_size)
  bool normalize_top_k = true;    // the k chosen weights renormalised to sum to 1
  // Per layer, whether its MLP is the sparse block (else a dense MLP of intermediate_size).
  std::vector<bool> sparse_layers;
  double router_aux_loss_coef = 0;  // config.json's; the recipe's moe.aux_loss_coef defaults to it
  // A shared expert beside the routed ones (Qwen3.5-MoE: shared_expert_intermediate_size), a
  // SwiGLU every token runs, scaled by sigmoid(shared_expert_gate x); 0: none.
  std::int64_t shared_intermediate = 0;

  // gpt-oss: the router's logits x Wᵀ + b; and the experts kept as the checkpoint stacks them
  // (model/moe.h, StackedExperts: gate_up_proj [E, H, 2 I] whose even columns are the gate's and
  // odd ones the up projection's, down_proj [E, I, H], a bias for each), through a clamped
  // SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) · g · sigmoid(alpha g).
  bool router_bias = false;
  bool clamped_stacked_experts = false;
  double swiglu_limit = 7.0, swiglu_alpha = 1.702;

  bool sparse(std::int64_t layer) const {
    return experts > 0 && layer < static_cast<std::int64_t>(sparse_layers.size()) && sparse_layers[static_cast<std::size_t>(layer)];
  }
  // The MLP width one token runs through on a sparse layer: k experts and the shared one.
  std::int64_t token_width() const { return top_k * intermediate + shared_intermediate; }
};

// Gated DeltaNet layers (Qwen3.5: model/gated_deltanet.h, docs/families.md#gated-deltanet): a
// gated linear recurrence in place of attention on the layers marked in `layers`. Query/key
// heads of key_dim, value heads of value_dim (each query/key head serves value_heads /
// key_heads consecutive value heads), a depthwise causal convolution of conv_kernel taps.
struct LinearAttention {
  std::int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 4;
  std::vector<bool> layers;  // per layer: layer_types "linear_attention"; empty: none

  bool layer(std::int64_t i) const { return i < static_cast<std::int64_t>(layers.size()) && layers[static_cast<std::size_t>(i)]; }
  bool any() const;
  // The convolved channels: queries, keys and values ([q; k; v] rows of in_proj_qkv).
  std::int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
};

// What varies between families, as data the shared blocks read (docs/families.md).
struct Architecture {
  bool qkv_bias = false;  // biases on q/k/v_proj
  bool o_bias = false;    // a bias on o_proj
  bool mlp_bias = false;  // biases on gate/up/down_proj
  // RMSNorm over head_dim on each query and key head (self_attn.q_norm, k_norm: [head_dim]),
  // after the projections and before RoPE (Qwen3).
  bool qk_norm = false;
  // Phi-3's fused projections, kept fused in memory and on disk: self_attn.qkv_proj
  // ([q; k; v] rows) and mlp.gate_up_proj ([gate; up] rows), split only in the math.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // Per layer, the attention window: a query attends to the `w` most recent positions, itself
  // included (q - k < w); 0: the whole causal context. Empty when every layer is global.
  std::vector<std::int64_t> layer_windows;
  // Per layer, whether RoPE rotates q and k (SmolLM3's NoPE layers: false). Empty: every layer.
  std::vector<bool> rope_layers;
  // Gemma 3's local layers rotate with their own frequencies (rope_local_base_freq): when set,
  // the layers marked in local_rope_layers use it instead of ModelConfig::rope.
  std::optional<RopeConfig> local_rope;
  std::vector<bool> local_rope_layers;

  Activation activation = Activation::silu;
  // RMSNorm scales by (1 + w), computed in fp32 before the cast back (Gemma); else w · x.
  bool norm_offset = false;
  // Gemma 2/3's four norms per layer: post_attention_layernorm normalises the attention output
  // before its residual add, and pre_/post_feedforward_layernorm wrap the MLP the same way.
  bool sandwich_norms = false;
  // Embeddings multiplied by sqrt(hidden_size), the factor cast to the activations' dtype (Gemma).
  bool embed_scale = false;
  // Attention scores scale: query_pre_attn_scalar^-0.5 (Gemma); nullopt: head_dim^-0.5.
  std::optional<double> query_pre_attn_scalar;
  // cap · tanh(s / cap) on the attention scores (after scaling, before the mask) and on the
  // final logits; 0: none (Gemma 2: attn_logit_softcapping, final_logit_softcapping).
  double attn_softcap = 0;
  double final_softcap = 0;
  // q_proj emits, per head, the query and then a gate of head_dim each; the attention output is
  // multiplied by sigmoid(gate) before o_proj (Qwen3.5).
  bool attn_output_gate = false;
  // gpt-oss's attention sinks: a learned logit per query head (self_attn.sinks [heads]) in the
  // denominator of every softmax of its attention (ops/attention.h).
  bool attention_sinks = false;
  // The RMSNorm's scale w · x̂ applied in fp32 before the cast back (gpt-oss keeps its norms
  // in fp32: transformers' _keep_in_fp32_modules); else Llama's x̂ cast back, then times w.
  bool norm_scale_fp32 = false;
  LinearAttention linear;
  MoeArchitecture moe;
  ModuleNames names;

  bool local_rope_layer(std::int64_t layer) const {
    return local_rope && layer < static_cast<std::int64_t>(local_rope_layers.size()) &&
           local_rope_layers[static_cast<std::size_t>(layer)];
  }

  bool rope(std::int64_t layer) const {
    return layer >= static_cast<std::int64_t>(rope_layers.size()) || rope_layers[static_cast<std::size_t>(layer)];
  }

  std::int64_t window(std::int64_t layer) const {
    return layer < static_cast<std::int64_t>(layer_windows.size()) ? layer_windows[static_cast<std::size_t>(layer)] : 0;
  }
  // The largest window of any layer; nullopt when every layer is global.
  std::optional<std::int64_t> sliding_window() const;
};

struct ModelConfig {
  std::string model_type;  // as config.json says it; its family reads it (model/family.h)
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  Architecture arch;
  std::string dtype = "float32";                // torch_dtype / dtype as written
  double initializer_range = 0.02;
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> pad_token_id;

  Json raw;  // the file as read, so a written config keeps keys ctune does not use
  // The multimodal checkpoint's model_type this text model was read from ("gemma3"; its
  // Family::wrapper says where the tensors are), or empty. raw is then the text model's config.
  std::string wrapper_type;
  // Where the checkpoint keeps a sparse layer's experts: empty, one module per expert
  // (experts.N.gate_proj.weight); else stacked under this module of the layer ("mlp":
  // transformers v5's mlp.experts.gate_up_proj [E, 2 I, H] and mlp.experts.down_proj [E, H, I],
  // the router at mlp.gate.weight). Set by the loader; written back the same way.
  std::string stacked_experts;

  std::int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
  // The projection called `name` (q_proj ... down_proj of the Llama block).
  ProjectionShape projection(const std::string& name) const;
  // The attention scores' scale: query_pre_attn_scalar^-0.5 when the family sets it, else head_dim^-0.5.
  double attention_scale() const;
  // The MLP width a token runs through: intermediate_size, or on a model whose every layer is
  // sparse (no intermediate_size), the routed experts' and the shared expert's.
  std::int64_t mlp_width() const;
};

// A rope section as config.json spells it (rope_theta at the top, rope_scaling or
// rope_parameters beside it), with `default_theta` when no theta is given; refuses rope types
// ctune does not implement, and yarn unless the family reads it (`yarn`).
RopeConfig parse_rope(const Json& json, const std::string& where, double default_theta, bool yarn = false);

// Rotates only the leading head_dim * factor dimensions of each head; refuses a factor that
// leaves no even count of them in (0, head_dim].
void set_partial_rotary(ModelConfig& config, double factor, const std::string& where);

// config.json's sliding_window: positive, or nullopt when absent or null.
std::optional<std::int64_t> read_sliding_window(const Json& json, const std::string& where);

// `where` names the source in messages (usually the config.json path).
ModelConfig parse_model_config(const Json& json, const std::string& where);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// The ids generation stops on: config.json's eos_token_id and, when `model_dir` has one,
// generation_config.json's (Llama 3 instruct checkpoints list <|eot_id|> only there).
std::vector<std::int64_t> generation_stop_ids(const ModelConfig& config, const std::filesystem::path& model_dir);

// The config as config.json, with dtype keys set to `dtype` ("float32", "bfloat16", "float16").
Json config_to_json(const ModelConfig& config, const std::string& dtype);

}  // namespace ctune::model
