// Gemma 2 (modeling_gemma2.py): Llama's projections with
//   - every RMSNorm scaling by (1 + w), in fp32 before the cast back;
//   - four norms per layer: h = x + post_attention_layernorm(attn(input_layernorm(x))),
//     out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
//   - embeddings × sqrt(hidden_size), the factor in the activations' dtype;
//   - GeGLU (hidden_activation gelu_pytorch_tanh);
//   - scores scaled by query_pre_attn_scalar^-0.5 and soft-capped, cap · tanh(s / cap), with
//     attn_logit_softcapping (default 50), the logits with final_logit_softcapping (default 30);
//   - a window of sliding_window (default 4096) on layer_types' sliding layers, by default the
//     even ones (0, 2, ...).
// Defaults as Gemma2Config: head_dim 256, tied head, 8192 positions. GGUF: llama.cpp's gemma2,
// its norms stored as 1 + w (export/gguf_metadata.cpp says which configs it can express).
// docs/families.md.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

double read_softcap(const Json& j, const std::string& where, const char* key, double fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_null()) return 0;
  const auto cap = json_number(j, key, where);
  if (!(*cap > 0)) throw ConfigError(where + ": \"" + key + "\" must be positive or null, found " + it->dump());
  return *cap;
}

void parse_gemma_keys(const Json& j, const std::string& where, ModelConfig& c) {
  // GemmaConfig reads hidden_activation; hidden_act, which checkpoints also carry, is unused.
  c.arch.activation = read_activation(j, where, "hidden_activation", "gelu_pytorch_tanh");
  const bool attention_bias = json_bool(j, "attention_bias", where).value_or(false);
  c.arch.qkv_bias = attention_bias;
  c.arch.o_bias = attention_bias;
  c.arch.norm_offset = true;
  c.arch.sandwich_norms = true;
  c.arch.embed_scale = true;
  const double scalar = json_number(j, "query_pre_attn_scalar", where).value_or(256.0);
  if (!(scalar > 0)) throw ConfigError(where + ": query_pre_attn_scalar must be positive, found " + std::to_string(scalar));
  c.arch.query_pre_attn_scalar = scalar;
}

std::vector<std::int64_t> gemma_layer_windows(const Json& j, const std::string& where, const std::vector<bool>& sliding) {
  // Gemma2Config / Gemma3TextConfig have no use_sliding_window: the window always applies,
  // 4096 when the key is absent; null means none.
  const auto window = j.contains("sliding_window") ? read_sliding_window(j, where) : std::optional<std::int64_t>(4096);
  if (!window) return {};
  std::vector<std::int64_t> windows(sliding.size(), 0);
  for (std::size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i]) windows[i] = *window;
  return windows;
}

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_gemma_keys(j, where, c);
  c.arch.attn_softcap = read_softcap(j, where, "attn_logit_softcapping", 50.0);
  c.arch.final_softcap = read_softcap(j, where, "final_logit_softcapping", 30.0);
  auto sliding = read_layer_types(j, where, c.num_hidden_layers);
  if (!sliding) {
    sliding.emplace();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) sliding->push_back(i % 2 == 0);
  }
  c.arch.layer_windows = gemma_layer_windows(j, where, *sliding);
}
}  // namespace

// The decoder layer's tensors as llama.cpp's gemma2/gemma3 name them (its norms hold 1 + w).
std::vector<std::pair<std::string, std::string>> gemma_gguf_layer_tensors() {
  auto tensors = llama_gguf_layer_tensors();
  for (auto& [hf, gguf] : tensors)
    if (hf == "post_attention_layernorm") gguf = "post_attention_norm";
  tensors.insert(tensors.end(), {{"pre_feedforward_layernorm", "ffn_norm"}, {"post_feedforward_layernorm", "post_ffw_norm"}});
  return tensors;
}

const Family& gemma2() {
  static const Family f{"gemma2", {"gemma2"}, 8192, 256, parse, {"gemma2", false, gemma_gguf_layer_tensors(), true}, 10000.0, true};
  return f;
}

}  // namespace ctune::model::families
