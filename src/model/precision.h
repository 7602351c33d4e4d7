// Mixed precision as autocast does it, made explicit per operation so it behaves the same on
// every LibTorch version and device: matmuls run in the compute dtype (operands cast to it),
// while RMSNorm statistics, softmax and the loss stay in fp32 (their modules do that
// themselves). Trainable parameters stay fp32 master copies; the cast of a weight to the
// compute dtype is a transient tensor, so gradients flow back to the fp32 master.
//
// CPU LibTorch 1.13 has no fp16 GEMM ("addmm_impl_cpu_" not implemented for 'Half') and no
// fp16 silu or dropout. There the fp16 matmul is computed in fp32 from fp16 operands and its
// result rounded to fp16 (the numerics of an fp16 GEMM with fp32 accumulation, including
// overflow to inf past 65504), and silu/dropout run in fp32 and round back. CUDA uses the
// native kernels.
#pragma once

#include <ATen/ATen.h>

namespace ctune::model {

// x [.., in] W [out, in] (+ b) in `dtype`; Undefined: in the operands' own dtypes.
at::Tensor linear_in(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::ScalarType dtype);

// a @ b with both operands in `dtype` (Undefined: as they are).
at::Tensor matmul_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype);

// silu and dropout that also work on fp16 CPU tensors.
at::Tensor silu_any(const at::Tensor& x);
at::Tensor dropout_any(const at::Tensor& x, double p, bool train);

}  // namespace ctune::model
