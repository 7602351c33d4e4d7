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
// its norms stored as 1 + w; what gemma2 and gemma3 files share is here too (LlamaCppGemma).
// docs/families.md.
#include <cmath>

#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

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

// The queries' scale llama.cpp's gemma2/gemma3 use: derived from the shape, not read (its 27B
// models scale by hidden / heads; the others by head_dim).
double LlamaCppGemma::scale(const ModelConfig& c) const {
  const bool big = c.num_hidden_layers == big_layers;
  return 1.0 / std::sqrt(static_cast<double>(big ? c.hidden_size / c.num_attention_heads : c.head_dim));
}

// llama.cpp's fixed layer pattern: layer i slides when i % pattern < pattern - 1, all with one window.
std::vector<std::int64_t> LlamaCppGemma::windows(std::int64_t layers, std::int64_t window) const {
  std::vector<std::int64_t> w(static_cast<std::size_t>(layers), 0);
  for (std::int64_t i = 0; i < layers; ++i)
    if (i % pattern < pattern - 1) w[static_cast<std::size_t>(i)] = window;
  return w;
}

void check_gemma_gguf(const ModelConfig& c, const LlamaCppGemma& g) {
  const std::string what = gguf_refusal(c);
  const std::string arch = g.architecture;
  if (c.arch.qkv_bias || c.arch.o_bias) throw UnsupportedError(what + "attention_bias has no " + arch + " GGUF form");
  if (!c.tie_word_embeddings)  // its loader never reads output.weight
    throw UnsupportedError(what + "an untied lm_head has no " + arch + " GGUF form (llama.cpp's Gemma always ties it)");
  const double expected = g.scale(c);
  if (std::abs(c.attention_scale() - expected) > 1e-6 * expected) {
    throw UnsupportedError(what + "query_pre_attn_scalar " + std::to_string(*c.arch.query_pre_attn_scalar) +
                           " has no " + arch + " GGUF form (llama.cpp derives the scale from the shape: expected " +
                           std::to_string(1.0 / (expected * expected)) + ")");
  }
  const auto window = c.arch.sliding_window();
  if (!window || c.arch.layer_windows != g.windows(c.num_hidden_layers, *window)) {
    throw UnsupportedError(what + "its sliding layers have no " + arch + " GGUF form (llama.cpp windows every layer but each " +
                           std::to_string(g.pattern) + "th, all with one sliding_window)");
  }
}

void refuse_gemma_rope_freqs(const ModelConfig& c, const LlamaCppGemma& g) {
  if (c.rope.type == "llama3")
    throw UnsupportedError(gguf_refusal(c) + "llama3 rope scaling has no " + g.architecture + " GGUF form");
}

void write_gemma_gguf(GgufKeyWriter& w, const ModelConfig& c) {
  w.u32("attention.sliding_window", *c.arch.sliding_window());
  if (c.arch.attn_softcap > 0) w.f32("attn_logit_softcapping", c.arch.attn_softcap);
  if (c.arch.final_softcap > 0) w.f32("final_logit_softcapping", c.arch.final_softcap);
}

void read_gemma_gguf(const GgufKeys& keys, ModelConfig& c, const LlamaCppGemma& g, double attn_cap, double final_cap,
                     std::int64_t default_window) {
  c.arch.activation = Activation::gelu_tanh;
  c.arch.norm_offset = c.arch.sandwich_norms = c.arch.embed_scale = true;
  const double scale = g.scale(c);
  c.arch.query_pre_attn_scalar = 1.0 / (scale * scale);
  c.arch.attn_softcap = attn_cap;
  c.arch.final_softcap = final_cap;
  const std::int64_t window = keys.integer_or("attention.sliding_window", default_window);
  if (window > 0) c.arch.layer_windows = g.windows(c.num_hidden_layers, window);
}

namespace {
constexpr LlamaCppGemma kGemma2{"gemma2", 2, 46};

// llama.cpp's gemma2 always soft-caps scores and logits.
void check_gguf(const ModelConfig& c) {
  check_gemma_gguf(c, kGemma2);
  if (c.arch.attn_softcap <= 0 || c.arch.final_softcap <= 0)
    throw UnsupportedError(gguf_refusal(c) + "llama.cpp's gemma2 always soft-caps scores and logits (a null cap has no GGUF form)");
  refuse_gemma_rope_freqs(c, kGemma2);
}

void read_gguf(const GgufKeys& keys, ModelConfig& c) {
  const double attn_cap = keys.number_or("attn_logit_softcapping", 50.0);
  const double final_cap = keys.number_or("final_logit_softcapping", 30.0);
  read_gemma_gguf(keys, c, kGemma2, attn_cap, final_cap, 4096);
}
}  // namespace

const Family& gemma2() {
  static const Family f = [] {
    Family g{"gemma2", {"gemma2"}, 8192, 256, parse, {"gemma2", false, gemma_gguf_layer_tensors(), true}, 10000.0, true};
    g.gguf.windows = GgufForm::Windows::carried;
    g.gguf.check = check_gguf;
    g.gguf.write_keys = write_gemma_gguf;
    g.gguf.read_keys = read_gguf;
    return g;
  }();
  return f;
}

}  // namespace ctune::model::families
