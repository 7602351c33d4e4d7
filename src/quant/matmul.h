// Matrix products in a compute dtype, the one place that knows CPU LibTorch 1.13 has no fp16
// GEMM ("addmm_impl_cpu_ not implemented for 'Half'"): fp16 on CPU is computed in fp32 from the
// fp16 inputs and the result rounded to fp16, i.e. the numerics of an fp16 GEMM with fp32
// accumulation. Every other dtype/device pair uses the native kernel (bf16 on CPU: oneDNN/AMX).
#pragma once

#include <ATen/ATen.h>

namespace ctune::quant {

// a: [.., k], b: [n, k] -> a bᵀ: [.., n], in a's dtype (b must have the same dtype).
at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b);

// a: [.., n], b: [n, k] -> a b: [.., k], in a's dtype (b must have the same dtype).
at::Tensor matmul_nn(const at::Tensor& a, const at::Tensor& b);

}  // namespace ctune::quant
