// Operations in a compute dtype, the one place that knows what CPU LibTorch 1.13 lacks: an fp16
// GEMM ("addmm_impl_cpu_" not implemented for 'Half'), fp16 silu and fp16 dropout. There an fp16
// matmul is computed in fp32 from the fp16 operands and its result rounded to fp16 (the numerics
// of an fp16 GEMM with fp32 accumulation, overflow to inf past 65504 included), and silu and
// dropout run in fp32 and round back. Every other dtype and device uses the native kernel (bf16
// on CPU: oneDNN, with AMX where the CPU has it).
//
// Mixed precision as autocast does it, made explicit per operation so it behaves the same on
// every LibTorch version and device: the model's matmuls call linear_in/matmul_in with the
// compute dtype (operands cast to it); the cast of an fp32 master weight is a transient tensor,
// so gradients flow back to the master.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// x [.., in] · W [out, in]ᵀ (+ b) with every operand in `dtype`; Undefined: in their own dtypes.
at::Tensor linear_in(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::ScalarType dtype);

// a @ b with both operands in `dtype` (Undefined: as they are).
at::Tensor matmul_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype);

// a: [.., k], b: [n, k] -> a bᵀ: [.., n], in a's dtype (b must have the same dtype).
at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b);

// a: [.., n], b: [n, k] -> a b: [.., k], in a's dtype (b must have the same dtype).
at::Tensor matmul_nn(const at::Tensor& a, const at::Tensor& b);

// silu, tanh-approximated GELU, tanh and dropout that also work on fp16 CPU tensors (LibTorch
// 1.13 has no Half CPU kernels for them: computed in fp32 and rounded back).
at::Tensor silu_any(const at::Tensor& x);
at::Tensor gelu_tanh_any(const at::Tensor& x);
at::Tensor tanh_any(const at::Tensor& x);
at::Tensor dropout_any(const at::Tensor& x, double p, bool train);

// bf16 GEMMs on CPU run in oneDNN, which JIT-compiles a kernel per GEMM shape and caches up to
// ONEDNN_PRIMITIVE_CACHE_CAPACITY of them (1024 unless set; an entry is its code and
// descriptors, outside the tensor pool). The bytes a full cache holds, at kGemmKernelBytes an
// entry; 0 where no GEMM goes through oneDNN (other dtypes, accelerators). A model of fixed
// shapes keeps a few dozen kernels (7 MB measured on a dense bf16 step); one whose row counts
// change every step (routed experts) fills it: measured 81 MB over ONEDNN_PRIMITIVE_CACHE_CAPACITY=0
// on the Qwen3-MoE bench shape, 79 KB an entry (docs/planning.md, "Known limits").
inline constexpr std::int64_t kGemmKernelBytes = 80 * 1000;
std::int64_t gemm_kernel_cache_bytes(at::Device device, at::ScalarType compute);

}  // namespace ctune::ops
