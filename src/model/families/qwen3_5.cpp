// Qwen3.5 / 3.6 / 3.8 dense (modeling_qwen3_5.py, Qwen3_5TextConfig): a hybrid of two layer
// kinds by layer_types (default: every full_attention_interval-th layer (4) full attention, the
// rest linear attention), both followed by a SwiGLU MLP:
//   - "linear_attention": a Gated DeltaNet (model/gated_deltanet.h) sized by linear_num_key_heads,
//     linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
//   - "full_attention": Qwen3's attention (q/k norms over head_dim) with a per-head output gate
//     (attn_output_gate, true when absent: q_proj emits query and gate per head;
//     o_proj(attn * sigmoid(gate))) and partial rotary
//     (partial_rotary_factor, 0.25 when absent, in rope_parameters or at the top level).
// Every RMSNorm scales by (1 + w) in fp32 (Qwen3_5RMSNorm), the q/k norms too; the DeltaNet's
// own gated norm scales by w. head_dim 256 and an untied head by default.
// rope_parameters' mrope_section / mrope_interleaved place the temporal, height and width
// positions of image tokens; for text all three are the token's position, so multimodal RoPE
// is ordinary RoPE and the keys are accepted and kept.
// `qwen3_5` (Qwen3_5ForConditionalGeneration, the layout released checkpoints use) is read as
// its text model: text_config, tensors under model.language_model.; the vision tower
// (model.visual.) and the multi-token-prediction head (mtp.) are not loaded.
// The MoE variant (`qwen3_5_moe_text`, wrapper `qwen3_5_moe`; modeling_qwen3_5_moe.py,
// Qwen3_5MoeTextConfig) has the same two mixers; every layer's MLP is sparse: a softmax router
// over num_experts (256), num_experts_per_tok (8) chosen and always renormalised, experts of
// moe_intermediate_size (512), and a shared expert of shared_expert_intermediate_size (512)
// scaled by sigmoid(shared_expert_gate x). It has no intermediate_size.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {

// layer_types as Qwen3_5TextConfig reads it: given, or derived from full_attention_interval.
std::vector<bool> linear_layers(const Json& j, const std::string& where, std::int64_t layers) {
  const auto it = j.find("layer_types");
  std::vector<bool> linear;
  if (it == j.end() || it->is_null()) {
    const std::int64_t interval = json_int(j, "full_attention_interval", where).value_or(4);
    if (interval <= 0) throw ConfigError(where + ": \"full_attention_interval\" must be positive, found " + std::to_string(interval));
    for (std::int64_t i = 0; i < layers; ++i) linear.push_back((i + 1) % interval != 0);
    return linear;
  }
  if (!it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
    throw ConfigError(where + ": \"layer_types\" must list one entry per layer (" + std::to_string(layers) + "), found " +
                      (it->is_array() ? std::to_string(it->size()) + " entries" : json_type_name(*it)));
  }
  for (const Json& t : *it) {
    if (t != "linear_attention" && t != "full_attention") {
      throw UnsupportedError(where + ": layer_types entry " + t.dump() +
                             " is not supported (expected linear_attention or full_attention)");
    }
    linear.push_back(t == "linear_attention");
  }
  return linear;
}

std::int64_t positive(const Json& j, const char* key, const std::string& where, std::int64_t fallback) {
  const std::int64_t v = json_int(j, key, where).value_or(fallback);
  if (v <= 0 || v > 65536) throw ConfigError(where + ": \"" + key + "\" must be in 1..65536, found " + std::to_string(v));
  return v;
}

void read_linear_attention(const Json& j, const std::string& where, ModelConfig& c) {
  LinearAttention& l = c.arch.linear;
  l.key_heads = positive(j, "linear_num_key_heads", where, 16);
  l.value_heads = positive(j, "linear_num_value_heads", where, 32);
  l.key_dim = positive(j, "linear_key_head_dim", where, 128);
  l.value_dim = positive(j, "linear_value_head_dim", where, 128);
  l.conv_kernel = positive(j, "linear_conv_kernel_dim", where, 4);
  if (l.value_heads % l.key_heads != 0) {
    throw ConfigError(where + ": linear_num_value_heads (" + std::to_string(l.value_heads) +
                      ") must be a multiple of linear_num_key_heads (" + std::to_string(l.key_heads) + ")");
  }
  l.layers = linear_layers(j, where, c.num_hidden_layers);
}

// partial_rotary_factor: rope_parameters' (transformers v5), else the top level's, else 0.25.
void read_partial_rotary(const Json& j, const std::string& where, ModelConfig& c) {
  std::optional<double> factor;
  if (const auto it = j.find("rope_parameters"); it != j.end() && it->is_object())
    factor = json_number(*it, "partial_rotary_factor", where + ": rope_parameters");
  if (!factor) factor = json_number(j, "partial_rotary_factor", where);
  set_partial_rotary(c, factor.value_or(0.25), where);
}

void parse_text(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);  // hidden_act; attention_bias puts biases on q/k/v/o
  c.arch.mlp_bias = false;         // Qwen3_5MLP has no biases and no mlp_bias key
  c.arch.qk_norm = true;
  c.arch.norm_offset = true;
  c.arch.attn_output_gate = json_bool(j, "attn_output_gate", where).value_or(true);  // released configs: true
  read_partial_rotary(j, where, c);
  read_linear_attention(j, where, c);
  if (const auto d = json_number(j, "attention_dropout", where); d && *d != 0.0)
    throw UnsupportedError(where + ": attention_dropout " + std::to_string(*d) + " is not supported (expected 0.0)");
}

void parse_moe(const Json& j, const std::string& where, ModelConfig& c) {
  parse_text(j, where, c);
  MoeArchitecture& m = c.arch.moe;
  m.intermediate = positive(j, "moe_intermediate_size", where, 512);
  m.shared_intermediate = positive(j, "shared_expert_intermediate_size", where, 512);
  m.normalize_top_k = true;  // Qwen3_5MoeTopKRouter renormalises whatever norm_topk_prob says
  parse_moe_keys(j, where, "num_experts", 256, 8, c);
  if (m.experts == 0) throw ConfigError(where + ": \"num_experts\" must be positive for " + c.model_type + ", found 0");
}

// A wrapper's text config (`text_type` its model_type), with the wrapper's keys the text part
// leaves out.
Json wrapped_text_config(const Json& j, const std::string& where, const std::string& text_type, const char* architecture) {
  const auto it = j.find("text_config");
  if (it == j.end() || !it->is_object())
    throw ConfigError(where + ": a " + j.value("model_type", std::string()) + " checkpoint needs \"text_config\" (an object), found " +
                      (it == j.end() ? std::string("none") : json_type_name(*it)));
  Json text = *it;
  if (const auto type = json_string(text, "model_type", where + ": text_config"); type && *type != text_type)
    throw UnsupportedError(where + ": text_config model_type \"" + *type + "\" is not supported (expected " + text_type + ")");
  inherit_wrapper_keys(j, text);
  text["model_type"] = text_type;
  text["architectures"] = Json::array({architecture});
  return text;
}

Json text_config(const Json& j, const std::string& where) { return wrapped_text_config(j, where, "qwen3_5_text", "Qwen3_5ForCausalLM"); }

Json moe_text_config(const Json& j, const std::string& where) {
  return wrapped_text_config(j, where, "qwen3_5_moe_text", "Qwen3_5MoeForCausalLM");
}

// The wrapper's layout: text tensors under model.language_model., the vision tower and the
// multi-token-prediction head ignored.
Wrapper wrapper(Json (*config)(const Json&, const std::string&)) {
  return Wrapper{config, {"model.language_model."}, {"lm_head.weight"}, {"model.visual.", "mtp."}};
}

}  // namespace

const Family& qwen3_5_text() {
  static const Family f = [] {
    Family q{"qwen3_5_text", {"qwen3_5_text"}, 32768, 256, parse_text};
    q.partial_rotary = true;
    q.ignored_prefixes = {"mtp."};
    return q;
  }();
  return f;
}

const Family& qwen3_5() {
  static const Family f = [] {
    Family w{"qwen3_5", {"qwen3_5"}};
    w.wrapper = wrapper(text_config);
    return w;
  }();
  return f;
}

const Family& qwen3_5_moe_text() {
  static const Family f = [] {
    Family q{"qwen3_5_moe_text", {"qwen3_5_moe_text"}, 32768, 256, parse_moe};
    q.partial_rotary = true;
    q.ignored_prefixes = {"mtp."};
    q.no_dense_mlp = true;
    return q;
  }();
  return f;
}

const Family& qwen3_5_moe() {
  static const Family f = [] {
    Family w{"qwen3_5_moe", {"qwen3_5_moe"}};
    w.wrapper = wrapper(moe_text_config);
    return w;
  }();
  return f;
}

}  // namespace ctune::model::families
