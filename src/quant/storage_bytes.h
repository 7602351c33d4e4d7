// How many bytes a quantised weight takes as stored: the formats' arithmetic, in one place for
// the quantisers (quant/) and the memory ledger (train/forecast/memory_ledger.cpp). Formats in
// docs/formats.md.
#pragma once

#include <cstdint>

namespace ctune::quant {

// NF4 double quantisation groups the per-block absmax values in blocks of 256 (bitsandbytes).
inline constexpr std::int64_t kNf4NestedBlocksize = 256;

// LLM.int8 vector-wise: one int8 code per weight and one fp32 absmax per row.
constexpr std::int64_t int8_weight_bytes(std::int64_t rows, std::int64_t cols) { return rows * cols + 4 * rows; }

// Blockwise NF4 of n weights: two 4-bit codes per byte, then per block an fp32 absmax, or with
// double quantisation an 8-bit code per block plus an fp32 scale per 256 blocks and one fp32
// offset.
constexpr std::int64_t nf4_weight_bytes(std::int64_t n, std::int64_t blocksize, bool double_quant) {
  const std::int64_t codes = (n + 1) / 2, blocks = (n + blocksize - 1) / blocksize;
  return double_quant ? codes + blocks + 4 * ((blocks + kNf4NestedBlocksize - 1) / kNf4NestedBlocksize) + 4
                      : codes + 4 * blocks;
}

}  // namespace ctune::quant
