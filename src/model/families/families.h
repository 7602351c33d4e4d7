// The families the registry lists, one file each (model/family.h).
#pragma once

#include "model/family.h"

namespace ctune::model::families {

const Family& llama();
const Family& mistral();
const Family& qwen2();
const Family& qwen3();
const Family& smollm3();

// Keys every Llama-like family reads: attention_bias (q/k/v/o), mlp_bias.
void parse_llama_keys(const Json& json, const std::string& where, ModelConfig& config);
// Per-layer windows by Qwen2Config's layer_types rule (families/qwen2.cpp).
std::vector<std::int64_t> qwen_layer_windows(const Json& json, const std::string& where, std::int64_t layers);
// config.json's layer_types: per layer whether it is "sliding_attention" (else
// "full_attention"); nullopt when absent (families/layer_types.cpp).
std::optional<std::vector<bool>> read_layer_types(const Json& json, const std::string& where, std::int64_t layers);
// sliding_window on the `sliding` layers, when use_sliding_window and a window is set; else none.
std::vector<std::int64_t> sliding_layer_windows(const Json& json, const std::string& where, const std::vector<bool>& sliding);

}  // namespace ctune::model::families
