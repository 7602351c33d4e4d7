// Tensor names between Hugging Face checkpoints and GGUF (llama.cpp's names): token_embd,
// output_norm, output, and blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_up, ffn_down}.{weight, bias}; plus the architecture name llama.cpp knows a
// config by (llama for Llama and Mistral, qwen2 for Qwen2). Facts: docs/formats.md#gguf-tensor-names.
#pragma once

#include <optional>
#include <string>

#include "model/config.h"

namespace ctune::exporter {

inline constexpr const char* kRopeFreqsName = "rope_freqs.weight";

// "llama" (model_type llama, mistral) or "qwen2"; UnsupportedError for anything else.
std::string gguf_architecture(const model::ModelConfig& config);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"; nullopt for a name with
// no GGUF counterpart.
std::optional<std::string> gguf_tensor_name(const std::string& hf_name);
// The inverse: "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight".
std::optional<std::string> hf_tensor_name(const std::string& gguf_name);

// Which attention projection a HF name belongs to: 'q', 'k' or 0 (the rows llama.cpp's NORM
// RoPE needs permuted are those of q_proj and k_proj, weight and bias).
char qk_projection(const std::string& hf_name);

}  // namespace ctune::exporter
