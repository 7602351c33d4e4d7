// Model hyperparameter keys as GGUF keys and back (docs/formats.md#gguf-model-keys). Written
// here for every general.architecture A:
//   general.architecture, general.type = "model", general.name, general.file_type,
//   (general.quantization_version = 2 with Q8_0 tensors), A.context_length, A.embedding_length,
//   A.block_count, A.feed_forward_length, A.attention.head_count, A.attention.head_count_kv,
//   A.attention.key_length, A.attention.value_length, A.attention.layer_norm_rms_epsilon (f32),
//   A.rope.dimension_count, A.rope.freq_base (f32), A.vocab_size, and for linear rope scaling
//   A.rope.scaling.type = "linear" and A.rope.scaling.factor. llama3 rope scaling is carried by
//   the rope_freqs.weight tensor instead (llama3_rope_factors). A.rope.dimension_count is the
//   rotary dimension (partial rotary). longrope: A.rope.scaling.original_context_length and
//   A.rope.scaling.attn_factor, the factors as tensors (longrope_factor_tensors). A mixture:
//   A.expert_count and A.expert_used_count.
// The keys only one architecture has (Gemma's and phi3's sliding_window, Gemma's soft-caps,
// qwen3moe's expert_feed_forward_length), what it cannot express and what llama.cpp fixes for
// it belong to the family: its GgufForm hooks (model/family.h, model/families/<family>.cpp).
// config_from_gguf is the inverse, used to rebuild a model from an exported file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/config.h"

namespace ctune::exporter {

// Refuses (UnsupportedError) what llama.cpp's architecture cannot express (the family's
// GgufForm::check; e.g. for qwen2, llama3 rope scaling, o_proj or MLP biases, or
// heads * head_dim != hidden_size), and a family with no GGUF form.
void check_exportable(const model::ModelConfig& config);

// llama.cpp's general.file_type (llama_ftype) for a file whose 2-D weights are `type`.
std::uint32_t gguf_file_type(io::GgmlType type);

void write_model_metadata(io::GgufWriter& writer, const model::ModelConfig& config, const std::string& name,
                          io::GgmlType weight_type);

// One factor per rotary pair: the base frequency divided by the llama3-scaled one (1 for short
// wavelengths, `factor` for long ones, blended between). llama.cpp divides its angles by them.
at::Tensor llama3_rope_factors(const model::ModelConfig& config);

// longrope's factors as llama.cpp's phi3 reads them: (rope_factors_long, long_factor) and
// (rope_factors_short, short_factor), F32.
std::vector<std::pair<std::string, at::Tensor>> longrope_factor_tensors(const model::RopeConfig& rope);

// The configuration an exported file describes: architecture keys plus what the tensors imply
// (vocab size from token_embd, tied head when there is no output.weight, biases when present).
// llama3 rope is left as "default": the caller applies rope_freqs itself; longrope (phi3, when
// rope_factors_long is present) has its type, original context and attention factor, and the
// caller reads the factors from the tensors. FormatError naming
// `where` for a missing or mistyped key.
model::ModelConfig config_from_gguf(const io::GgufHeader& header, const std::string& where);

}  // namespace ctune::exporter
