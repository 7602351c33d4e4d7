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

}  // namespace ctune::model::families
