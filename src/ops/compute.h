// Operations in a compute dtype, the one place that knows which 16-bit operations the CPU lacks:
// - fp16 GEMMs ("addmm_impl_cpu_" not implemented for 'Half' in LibTorch 1.13), and bf16 GEMMs on
//   a CPU without AVX-512 (LibTorch's scalar fallback, about 20x below the fp32 GEMM on an
//   AVX2-only AMD EPYC: ops/cpu_features.h). There the product is computed in fp32 from the 16-bit
//   operands and rounded to their dtype: the numerics of a 16-bit GEMM with fp32 accumulation
//   (overflow to inf past 65504 in fp16 included). It saves the 16-bit operands for backward, as
//   the native GEMM does, so the memory ledger holds; the fp32 copies are transient and, for a
//   large operand (the head), made a tile of at most kGemmBlockElements at a time.
// - fp16 silu, GELU, tanh and dropout: run in fp32 and round back.
// Every other dtype and device uses the native kernel (bf16 on an AVX-512 CPU: oneDNN, with AMX
// where the CPU has it).
//
// Mixed precision as autocast does it, made explicit per operation so it behaves the same on
// every LibTorch version and device: the model's matmuls call linear_in/matmul_in with the
// compute dtype (operands cast to it); the cast of an fp32 master weight is a transient tensor,
// so gradients flow back to the master.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ctune::ops {

// Whether a `dtype` GEMM on `device` runs in fp32 from its 16-bit operands (above): CPU fp16
// always, CPU bf16 where cpu_features::native_bf16_gemm() is false or a Bf16GemmInFp32 is alive.
bool gemm_in_fp32(at::ScalarType dtype, at::Device device);

// While alive, CPU bf16 GEMMs take the fp32 route on any CPU (tests compare the two routes).
class Bf16GemmInFp32 {
 public:
  Bf16GemmInFp32();
  ~Bf16GemmInFp32();
  Bf16GemmInFp32(const Bf16GemmInFp32&) = delete;
  Bf16GemmInFp32& operator=(const Bf16GemmInFp32&) = delete;

 private:
  bool previous_;
};

// The fp32 route's tiles: at most kGemmTile rows, columns and depth, so that no operand tile and
// no fp32 result tile passes kGemmBlockElements (16 MB of fp32).
inline constexpr std::int64_t kGemmTile = 2048;
inline constexpr std::int64_t kGemmBlockElements = kGemmTile * kGemmTile;

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
