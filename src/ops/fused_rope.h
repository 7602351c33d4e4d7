// Rotary position embeddings (rotate-half convention, partial rotary included) applied to a
// projection's heads and written straight into the attention's layout, [B, T, heads, d] ->
// [B, heads, T, d] contiguous, in one pass on a CPU (the kernels of ops/cpu_kernels.h) instead
// of ATen's narrow, negate, concatenate, two products, sum, cast and transpose copy. Arithmetic
// in fp32 (float64 for float64), rounded once to the output dtype. Backward saves only the
// tables (shared by every layer). Off the CPU: ATen's operations.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// x: [B, T, heads, d] (last dimension contiguous); cos, sin: [B, T, rot], rot <= d even, in
// fp32 (float64 for a float64 x). Returns [B, heads, T, d] contiguous in `dtype`: the first rot
// dimensions of each head rotated, the rest copied.
at::Tensor rope_heads_first(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::ScalarType dtype);

// The same rotation in place of nothing: x [B, heads, T, d] (any strides), the result in x's
// dtype promoted with the tables'. The reference form (export tests) and the path off the CPU.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace ctune::ops
