// MXFP4 (the OCP microscaling format gpt-oss's checkpoints store their experts in), read only:
// each value an E2M1 4-bit float (two per byte, the low nibble first), each run of 32 values
// sharing one E8M0 scale byte s, the power of two 2^(s - 127). transformers' layout
// (integrations/mxfp4.py): a stacked parameter P [E, A, B] is stored as
//   P_blocks [E, B, A / 32, 16] (uint8)  and  P_scales [E, B, A / 32] (uint8),
// the dequantised [E, B, A] transposed to [E, A, B]. Dequantisation is exact: every E2M1 value
// times a power of two is representable in fp32 and bf16 (docs/formats.md#mxfp4).
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace ctune::quant {

// The 16 E2M1 values by nibble: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (8 is -0).
float e2m1_value(int nibble);

// P [E, A, B] in `dtype` from blocks [E, B, G, 16] and scales [E, B, G] (A = 32 G); ShapeError
// naming `name` (the parameter, "…experts.gate_up_proj") when the shapes do not fit.
at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType dtype, const std::string& name);

}  // namespace ctune::quant
