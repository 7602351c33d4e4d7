// What family files share (model/family.h): config.json readers several families use, and the
// parts of GGUF forms that two families have in common. Each family itself is declared where
// the registry lists it (families/registry.cpp).
#pragma once

#include "model/config.h"
#include "model/family.h"

namespace ctune::model::families {

// config.json's activation key (`fallback` when absent) as an Activation; refuses others.
Activation read_activation(const Json& json, const std::string& where, const char* key, const char* fallback);
// Keys every Llama-like family reads: hidden_act, attention_bias (q/k/v/o), mlp_bias.
void parse_llama_keys(const Json& json, const std::string& where, ModelConfig& config);
// Per-layer windows by Qwen2Config's layer_types rule (families/qwen2.cpp).
std::vector<std::int64_t> qwen_layer_windows(const Json& json, const std::string& where, std::int64_t layers);
// config.json's layer_types: per layer whether it is "sliding_attention" (else
// "full_attention"); nullopt when absent (families/layer_types.cpp).
std::optional<std::vector<bool>> read_layer_types(const Json& json, const std::string& where, std::int64_t layers);
// The body Gemma 2 and Gemma 3 share (families/gemma2.cpp): (1 + w) norms, sandwich norms,
// scaled embeddings, GeGLU (hidden_activation), query_pre_attn_scalar, attention_bias.
void parse_gemma_keys(const Json& json, const std::string& where, ModelConfig& config);
// The decoder layer's tensors as llama.cpp's gemma2/gemma3 name them (families/gemma2.cpp).
std::vector<std::pair<std::string, std::string>> gemma_gguf_layer_tensors();
// What llama.cpp's gemma2 and gemma3 fix from the shape (families/gemma2.cpp): the sliding
// layer pattern (layer i slides when i % pattern < pattern - 1) and the queries' scale (the
// 27B models, `big_layers` layers, scale by hidden / heads, the others by head_dim).
struct LlamaCppGemma {
  const char* architecture;
  std::int64_t pattern;
  std::int64_t big_layers;
  double scale(const ModelConfig& config) const;
  std::vector<std::int64_t> windows(std::int64_t layers, std::int64_t window) const;
};
// The refusals gemma2 and gemma3 share: biases, an untied head, a scale or sliding layers that
// llama.cpp would derive otherwise; and llama3 rope scaling.
void check_gemma_gguf(const ModelConfig& config, const LlamaCppGemma& gemma);
void refuse_gemma_rope_freqs(const ModelConfig& config, const LlamaCppGemma& gemma);
// The keys both write (the window, the soft-caps that are set) and read back, with the caps
// and the window a file without them implies.
void write_gemma_gguf(GgufKeyWriter& writer, const ModelConfig& config);
void read_gemma_gguf(const GgufKeys& keys, ModelConfig& config, const LlamaCppGemma& gemma, double attn_cap, double final_cap,
                     std::int64_t default_window);
// llama.cpp's qwen3 and qwen3moe refuse projection biases and llama3 rope (families/qwen3.cpp).
void check_qwen3_gguf(const ModelConfig& config, const std::string& architecture);
// sliding_window (4096 when absent, none when null) on the `sliding` layers (families/gemma2.cpp).
std::vector<std::int64_t> gemma_layer_windows(const Json& json, const std::string& where, const std::vector<bool>& sliding);
// A soft-cap key: its value, 0 when null (no cap), `fallback` when absent.
double read_softcap(const Json& json, const std::string& where, const char* key, double fallback);
// A multimodal wrapper's own keys its text model needs when the text part has none (dtype,
// token ids, tied head, initializer range), copied into `text` (families/wrapper_keys.cpp).
void inherit_wrapper_keys(const Json& wrapper, Json& text);
// The MoE keys Mixtral and Qwen3-MoE share (families/moe_keys.cpp): the expert count under
// `experts_key`, num_experts_per_tok, router_aux_loss_coef; refuses router_jitter_noise. Call
// after setting moe.intermediate (and moe.sparse_layers, else every layer is sparse).
void parse_moe_keys(const Json& json, const std::string& where, const char* experts_key, std::int64_t default_experts,
                    std::int64_t default_top_k, ModelConfig& config);
// Per layer whether its MLP is sparse by Qwen3MoeDecoderLayer's rule (Qwen3-Next's too): every
// decoder_sparse_step-th (1) layer, except those mlp_only_layers ([]) lists (families/moe_keys.cpp).
std::vector<bool> read_sparse_layers(const Json& json, const std::string& where, std::int64_t layers);
// sliding_window on the `sliding` layers, when use_sliding_window and a window is set; else none.
std::vector<std::int64_t> sliding_layer_windows(const Json& json, const std::string& where, const std::vector<bool>& sliding);

}  // namespace ctune::model::families
