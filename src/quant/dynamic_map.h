// bitsandbytes' signed 8-bit dynamic map and blockwise 8-bit quantisation with it: the storage of
// NF4's per-block absmax under double quantisation (docs/formats.md#double-quantisation-and-the-dynamic-map). The map is
// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for i = 0..6, the midpoints
// of linspace(0.1, 1, 2^i + 1) (fp32) times 10^(i-6), with both signs, plus 0 and 1.0; sorted,
// 256 values, largest 1.0, most negative -0.99296875 (there is no -1).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ctune::quant {

// The 256 fp32 levels, ascending.
const std::vector<float>& dynamic_map();

struct Blockwise8 {
  at::Tensor codes;   // uint8 [n]: nearest map level to x · (1/absmax), clamped to [-1, 1]
  at::Tensor absmax;  // fp32 [⌈n/blocksize⌉]
};

// x: fp32 [n] (contiguous). An all-zero block has absmax 0 and codes of the level 0.
Blockwise8 quantize_blockwise8(const at::Tensor& x, std::int64_t blocksize);

// fp32 [n]: level[code] · absmax[block].
at::Tensor dequantize_blockwise8(const Blockwise8& q, std::int64_t blocksize);

}  // namespace ctune::quant
