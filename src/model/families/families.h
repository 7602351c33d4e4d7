// The families the registry lists, one file each (model/family.h).
#pragma once

#include "model/config.h"
#include "model/family.h"

namespace ctune::model::families {

const Family& llama();
const Family& mistral();
const Family& qwen2();
const Family& qwen3();
const Family& smollm3();

const Family& gemma2();
const Family& gemma3_text();
const Family& gemma3();  // the multimodal wrapper, read as its text model
const Family& phi3();
const Family& mixtral();
const Family& qwen3_moe();

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
// sliding_window (4096 when absent, none when null) on the `sliding` layers (families/gemma2.cpp).
std::vector<std::int64_t> gemma_layer_windows(const Json& json, const std::string& where, const std::vector<bool>& sliding);
// A soft-cap key: its value, 0 when null (no cap), `fallback` when absent.
double read_softcap(const Json& json, const std::string& where, const char* key, double fallback);
// The MoE keys Mixtral and Qwen3-MoE share (families/moe_keys.cpp): the expert count under
// `experts_key`, num_experts_per_tok, router_aux_loss_coef; refuses router_jitter_noise. Call
// after setting moe.intermediate (and moe.sparse_layers, else every layer is sparse).
void parse_moe_keys(const Json& json, const std::string& where, const char* experts_key, std::int64_t default_experts,
                    std::int64_t default_top_k, ModelConfig& config);
// sliding_window on the `sliding` layers, when use_sliding_window and a window is set; else none.
std::vector<std::int64_t> sliding_layer_windows(const Json& json, const std::string& where, const std::vector<bool>& sliding);

}  // namespace ctune::model::families
