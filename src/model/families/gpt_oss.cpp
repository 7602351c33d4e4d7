// gpt-oss (`gpt_oss`; transformers' modeling_gpt_oss.py, GptOssConfig): Llama's pre-norm decoder
// with
// - attention: biases on q/k/v/o (attention_bias, default true), head_dim 64 by default, and a
//   learned sink logit per query head (self_attn.sinks) in every softmax's denominator;
// - layers alternating by layer_types: sliding_attention ones (by default the even layers) see
//   the last sliding_window (128) positions, full_attention ones everything;
// - YaRN RoPE (rope_theta 150000); a config without any rope section gets GptOssConfig's
//   default: factor 32 over an original context of 4096, beta_fast 32, beta_slow 1, truncate
//   false;
// - on every layer a sparse MLP `mlp`: a router `mlp.router` with a bias over num_local_experts
//   (128) experts, num_experts_per_tok (4) per token, softmax over the chosen logits; experts
//   stacked as the checkpoint stores them (model/stacked_experts.h: gate and up interleaved,
//   biases, the clamped SwiGLU with swiglu_limit 7 and alpha 1.702), each intermediate_size wide;
// - RMSNorms scaled in fp32 before the cast back (norm weights kept in fp32 by transformers).
// Released checkpoints store the experts in MXFP4 (*_blocks, *_scales; quantization_config
// quant_method "mxfp4"): the loader dequantises them (io/mxfp4.h). No GGUF form yet.
#include <set>

#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {

// Every key a gpt-oss config.json carries (GptOssConfig's and the PretrainedConfig keys
// transformers writes); any other is refused by name, as one ctune might silently ignore.
const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {
      "architectures", "attention_bias", "attention_dropout", "bos_token_id", "dtype", "eos_token_id", "experts_per_token",
      "head_dim", "hidden_act", "hidden_size", "initial_context_length", "initializer_range", "intermediate_size",
      "layer_types", "max_position_embeddings", "model_type", "num_attention_heads", "num_experts_per_tok",
      "num_hidden_layers", "num_key_value_heads", "num_local_experts", "output_router_logits", "pad_token_id",
      "quantization_config", "rms_norm_eps", "rope_parameters", "rope_scaling", "rope_theta", "router_aux_loss_coef",
      "sliding_window", "swiglu_alpha", "swiglu_limit", "tie_word_embeddings", "torch_dtype", "transformers_version",
      "use_cache", "vocab_size", "_name_or_path"};
  return keys;
}

void refuse_unknown_keys(const Json& j, const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known_keys().count(it.key())) continue;
    throw UnsupportedError(where + ": key \"" + it.key() + "\" is not a gpt_oss key ctune knows (expected only GptOssConfig's keys)");
  }
}

// The released checkpoints' quantization_config: MXFP4 experts, which the loader dequantises.
void check_quantization(const Json& j, const std::string& where) {
  const auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) throw ConfigError(where + ": \"quantization_config\" must be an object, found " + it->dump());
  const auto method = json_string(*it, "quant_method", where + ": quantization_config");
  if (method != "mxfp4") {
    throw UnsupportedError(where + ": quantization_config.quant_method " + (method ? "\"" + *method + "\"" : std::string("(absent)")) +
                           " is not supported for gpt_oss (expected \"mxfp4\")");
  }
}

// GptOssConfig's default rope when config.json has no rope section.
void default_yarn(const Json& j, ModelConfig& c) {
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (j.contains(key) && !j[key].is_null()) return;
  c.rope.type = "yarn";
  c.rope.factor = 32.0;
  c.rope.beta_fast = 32.0;
  c.rope.beta_slow = 1.0;
  c.rope.truncate = false;
  c.rope.original_max_position = 4096;
  c.rope.attention_factor = 0;  // derived (finish_yarn)
}

void parse_attention(const Json& j, const std::string& where, ModelConfig& c) {
  const bool bias = json_bool(j, "attention_bias", where).value_or(true);
  c.arch.qkv_bias = c.arch.o_bias = bias;
  c.arch.attention_sinks = true;
  if (const auto d = json_number(j, "attention_dropout", where); d && *d != 0.0)
    throw UnsupportedError(where + ": attention_dropout " + std::to_string(*d) + " is not supported (expected 0.0)");
  // GptOssConfig: sliding on the even layers unless layer_types says otherwise; the window
  // defaults to 128, and null means none (those layers then see everything, as transformers).
  auto sliding = read_layer_types(j, where, c.num_hidden_layers);
  if (!sliding) {
    sliding.emplace(static_cast<std::size_t>(c.num_hidden_layers), false);
    for (std::size_t i = 0; i < sliding->size(); ++i) (*sliding)[i] = i % 2 == 0;
  }
  std::optional<std::int64_t> window = j.contains("sliding_window") ? read_sliding_window(j, where) : std::optional<std::int64_t>(128);
  if (!window) return;
  c.arch.layer_windows.assign(sliding->size(), 0);
  for (std::size_t i = 0; i < sliding->size(); ++i)
    if ((*sliding)[i]) c.arch.layer_windows[i] = *window;
}

void parse_experts(const Json& j, const std::string& where, ModelConfig& c) {
  MoeArchitecture& m = c.arch.moe;
  // intermediate_size is each expert's width; no layer has a dense MLP (as Qwen3-Next's).
  m.intermediate = json_int(j, "intermediate_size", where).value_or(2880);
  c.intermediate_size = 0;
  m.normalize_top_k = true;  // softmax over the k chosen logits = the top k of the softmax, renormalised
  m.router_bias = true;
  m.clamped_stacked_experts = true;
  m.swiglu_limit = json_number(j, "swiglu_limit", where).value_or(7.0);
  m.swiglu_alpha = json_number(j, "swiglu_alpha", where).value_or(1.702);
  if (!(m.swiglu_limit > 0)) throw ConfigError(where + ": \"swiglu_limit\" must be positive, found " + std::to_string(m.swiglu_limit));
  parse_moe_keys(j, where, "num_local_experts", 128, 4, c);
  if (m.experts == 0) throw ConfigError(where + ": \"num_local_experts\" must be positive for gpt_oss, found 0");
}

void parse(const Json& j, const std::string& where, ModelConfig& c) {
  refuse_unknown_keys(j, where);
  check_quantization(j, where);
  // ctune dequantises MXFP4 experts at load and writes them dense: a config.json it writes
  // must not describe them as quantised.
  c.raw.erase("quantization_config");
  default_yarn(j, c);
  parse_attention(j, where, c);
  parse_experts(j, where, c);
  c.arch.norm_scale_fp32 = true;
}
}  // namespace

const Family& gpt_oss() {
  static const Family f = [] {
    Family g{"gpt_oss", {"gpt_oss"}, 131072, 64, parse, GgufForm{}, 150000.0};
    g.yarn = true;
    g.no_dense_mlp = true;  // every layer sparse: intermediate_size sizes the experts
    g.names.router = "router";
    return g;
  }();
  return f;
}

}  // namespace ctune::model::families
