// Model hyperparameters as GGUF keys and back (docs/formats.md#gguf-model-keys). Written for
// general.architecture A (llama or qwen2):
//   general.architecture, general.type = "model", general.name, general.file_type,
//   (general.quantization_version = 2 with Q8_0 tensors), A.context_length, A.embedding_length,
//   A.block_count, A.feed_forward_length, A.attention.head_count, A.attention.head_count_kv,
//   A.attention.key_length, A.attention.value_length, A.attention.layer_norm_rms_epsilon (f32),
//   A.rope.dimension_count, A.rope.freq_base (f32), A.vocab_size, and for linear rope scaling
//   A.rope.scaling.type = "linear" and A.rope.scaling.factor. llama3 rope scaling is carried by
//   the rope_freqs.weight tensor instead (llama3_rope_factors).
// config_from_gguf is the inverse, used to rebuild a model from an exported file.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/config.h"

namespace ctune::exporter {

// Refuses (UnsupportedError) what llama.cpp's architecture cannot express: for qwen2, llama3
// rope scaling, o_proj or MLP biases, or heads * head_dim != hidden_size.
void check_exportable(const model::ModelConfig& config);

// llama.cpp's general.file_type (llama_ftype) for a file whose 2-D weights are `type`.
std::uint32_t gguf_file_type(io::GgmlType type);

void write_model_metadata(io::GgufWriter& writer, const model::ModelConfig& config, const std::string& name,
                          io::GgmlType weight_type);

// One factor per rotary pair: the base frequency divided by the llama3-scaled one (1 for short
// wavelengths, `factor` for long ones, blended between). llama.cpp divides its angles by them.
at::Tensor llama3_rope_factors(const model::ModelConfig& config);

// The configuration an exported file describes: architecture keys plus what the tensors imply
// (vocab size from token_embd, tied head when there is no output.weight, biases when present).
// llama3 rope is left as "default": the caller applies rope_freqs itself. FormatError naming
// `where` for a missing or mistyped key.
model::ModelConfig config_from_gguf(const io::GgufHeader& header, const std::string& where);

}  // namespace ctune::exporter
