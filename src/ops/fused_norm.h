// RMSNorm as Hugging Face computes it (statistics in fp32, the normalised value cast back to the
// input's dtype, then scaled by the weight; or, with `offset` (Gemma), scaled by 1 + weight in
// fp32 before the cast), forward and backward each one pass over a row on a CPU (the kernels
// of ops/cpu_kernels.h) instead of ATen's six and about ten. Backward keeps the input and one
// fp32 statistic per row (1 / rms), not two fp32 copies of the row. Off the CPU, or for dtype
// pairs the kernel does not cover: ATen's operations.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// x: [.., D], weight: [D]. Returns [.., D] in x's dtype with `offset`, else in the promotion of
// weight's and x's dtypes (a bf16 input with fp32 master weights gives fp32, as in Hugging Face).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool offset);

}  // namespace ctune::ops
