// Tensor data between LibTorch and GGUF: the Q/K row permutation llama.cpp's "llama"
// architecture needs, the storage type of each tensor, and conversion of a tensor to the bytes
// of a ggml type and back.
//
// Permutation (docs/formats.md#qk-permutation): HF q_proj/k_proj rows are ordered for rotate-half RoPE
// (element j of a head pairs with j + d/2); llama.cpp's NORM RoPE pairs adjacent elements
// (2i, 2i+1). permute_qk_rows views the rows as [heads, 2, d/2, ...], swaps axes 1 and 2 and
// flattens back, so row 2i of a head holds HF row i and row 2i+1 holds HF row i + d/2. Weights,
// biases and LoRA B matrices (output rows) all go through it; qwen2 uses NEOX (rotate-half) RoPE
// in llama.cpp and is not permuted. Other architectures' value changes (Qwen3.5's -exp(A_log),
// its DeltaNet heads tiled) are the family's GgufChange list, applied by apply_changes.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "io/gguf.h"
#include "model/family.h"

namespace ctune::exporter {

// rows: [heads * head_dim, ...] -> the same shape, rows reordered. unpermute is the inverse.
at::Tensor permute_qk_rows(const at::Tensor& rows, std::int64_t heads);
at::Tensor unpermute_qk_rows(const at::Tensor& rows, std::int64_t heads);

// A parameter's values as the converter writes them: `changes` (model/family.h's GgufChange,
// from gguf_changes) applied in order; undo_changes is the inverse, in reverse order. Shapes
// change with drop_dim1 only. A meta tensor gives the stored shape without the values.
at::Tensor apply_changes(const at::Tensor& tensor, const std::vector<model::GgufChange>& changes);
at::Tensor undo_changes(const at::Tensor& tensor, const std::vector<model::GgufChange>& changes);

// A LoRA pair's share of its weight's changes: those along the weight's rows (dim 0) reorder
// B's rows, those along its columns (dim 1) A's columns. UnsupportedError naming `weight` for a
// change of values or shape, which no adapted (Linear) weight has.
struct LoraChanges {
  std::vector<model::GgufChange> a, b;
};
LoraChanges lora_changes(const std::vector<model::GgufChange>& weight_changes, const std::string& weight);

// The ggml type a model tensor is stored as for `--type requested`: 1-D tensors (norms, biases,
// rope_freqs) stay F32, as llama.cpp expects; 2-D weights take the requested type, except that
// Q8_0 falls back to F16 for rows that are not a multiple of 32 values.
io::GgmlType storage_type(const at::Tensor& tensor, io::GgmlType requested);

// PyTorch sizes reversed (ggml's ne order).
std::vector<std::int64_t> ggml_dims(const at::Tensor& tensor);

// The tensor (any float dtype, any layout) as the bytes of `type`, converted through fp32.
std::vector<std::uint8_t> encode_tensor(const at::Tensor& tensor, io::GgmlType type);

// A GGUF tensor as an fp32 CPU tensor in PyTorch order (dequantized when needed).
at::Tensor decode_tensor(const io::GgufFile& file, const io::GgufTensorInfo& info);

// The values `tensor` reads back as once stored as `type`: encode then decode, in memory (fp32,
// same shape). The identity for F32. The self-check applies it to the source model to know what
// a rounded export must reproduce exactly.
at::Tensor round_trip(const at::Tensor& tensor, io::GgmlType type);

}  // namespace ctune::exporter
