// Blockwise NF4 (bitsandbytes/QLoRA, docs/formats.md#nf4): the weight flattened row-major is
// cut into blocks of `blocksize` (64..4096, a power of two; the last block may be short), each
// block stores its fp32 absmax, and every element the index of the NF4 level nearest to
// x · (1/absmax). Codes are packed two per byte, the first element in the high nibble; an odd
// element count pads the last low nibble with code 7 (the level 0, as a zero-padded tail codes).
// An all-zero block has absmax 0 and codes 7. Double quantisation stores the absmax as
// offset = mean(absmax) plus (absmax − offset) in the 8-bit dynamic map, blocks of 256, with one
// fp32 nested absmax per 256 (dynamic_map.h). Codes are always chosen with the exact absmax.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/quant_names.h"

namespace ctune::quant {

// The 16 NF4 levels, index 0..15 (ascending, level 7 is exactly 0).
const std::array<float, 16>& nf4_levels();

// Half the largest gap between adjacent NF4 levels: the worst relative rounding error.
double nf4_max_half_gap();

constexpr std::int64_t kNf4DefaultBlocksize = kNf4BlocksizeDefault;  // core/quant_names.h

struct Nf4Weight {
  std::vector<std::int64_t> shape;  // the original weight's shape ([out, in] for a Linear)
  std::int64_t numel = 0;
  std::int64_t blocksize = kNf4DefaultBlocksize;
  at::Tensor packed;                // uint8 [⌈numel/2⌉]
  bool double_quant = false;
  at::Tensor absmax;                // fp32 [blocks] (undefined with double quantisation)
  at::Tensor qabsmax;               // uint8 [blocks]: dynamic-map codes of absmax − offset
  at::Tensor nested_absmax;         // fp32 [⌈blocks/256⌉]
  float offset = 0.0f;              // fp32 mean of the absmax (mean taken in double)

  std::int64_t blocks() const { return (numel + blocksize - 1) / blocksize; }
  // ⌈n/2⌉ + 4·blocks, or with double quantisation ⌈n/2⌉ + blocks + 4·⌈blocks/256⌉ + 4.
  std::int64_t bytes() const;
  // fp32 [blocks]: the stored absmax, or with double quantisation level·nested + offset.
  at::Tensor block_absmax() const;
};

// w: any shape, any floating dtype (coded from its fp32 values). Throws ConfigError for a bad
// blocksize.
Nf4Weight quantize_nf4(const at::Tensor& w, std::int64_t blocksize = kNf4DefaultBlocksize, bool double_quant = false);

// w.shape in `dtype`: level[code] · absmax computed in fp32, rounded to dtype.
at::Tensor dequantize(const Nf4Weight& w, at::ScalarType dtype);

}  // namespace ctune::quant
