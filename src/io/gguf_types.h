// ggml tensor types as GGUF stores them (torch-free): the type ids, their block layout, and the
// element conversions ctune writes and reads back: F32, F16 (IEEE half, round to nearest even),
// BF16 (top 16 bits of an F32, round to nearest even) and Q8_0 (blocks of 32 values: one F16
// scale d = max|x| / 127, then 32 int8 q = round(x / d); x' = d * q), exactly as ggml defines
// them. Facts: docs/formats.md#gguf-tensor-types, ggml's ggml-common.h / ggml-quants.c.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctune::io {

// ggml_type ids (ggml.h). Only the types ctune can size, write and dequantize are named.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// nullopt for an id ctune does not know (e.g. the k-quants).
std::optional<GgmlType> ggml_type_from_id(std::uint32_t id);
const char* ggml_type_name(GgmlType type);
// Values per block (32 for Q8_0, 1 otherwise) and bytes per block (34 for Q8_0).
std::size_t ggml_block_size(GgmlType type);
std::size_t ggml_block_bytes(GgmlType type);
constexpr std::size_t kQ8BlockSize = 32;
constexpr std::size_t kQ8BlockBytes = 2 + kQ8BlockSize;

// Bytes of a tensor with ne[0] (the contiguous dimension) a multiple of the block size.
std::uint64_t ggml_nbytes(GgmlType type, std::uint64_t numel);

std::uint16_t fp32_to_fp16(float x);
float fp16_to_fp32(std::uint16_t h);
std::uint16_t fp32_to_bf16(float x);
float bf16_to_fp32(std::uint16_t h);

// values.size() must be a multiple of the block size for Q8_0. Returns the tensor's bytes.
std::vector<std::uint8_t> encode_ggml(GgmlType type, const float* values, std::size_t n);
// The inverse for F32, F16, BF16 and Q8_0 (n values from `bytes`). UnsupportedError otherwise.
std::vector<float> decode_ggml(GgmlType type, const std::uint8_t* bytes, std::size_t n, const std::string& where);

}  // namespace ctune::io
