// GEMMs on raw CPU buffers with C in fp32: oneDNN's, the library LibTorch's own CPU matmuls run
// on. Row-major, alpha and beta as in BLAS. Two uses:
// - kernels that split their own work over ATen's thread pool and keep each task's operands in
//   the core's cache (the tiled attention, ops/attention_tiled.h). Called inside
//   at::parallel_for, oneDNN computes on the calling thread.
// - the head's bf16 weight gradient accumulated into its fp32 accumulator chunk by chunk
//   (weight_grad_fp32 below, train/step/chunked_loss.h). Called outside a parallel region, oneDNN
//   spreads the GEMM over the OpenMP threads.
// Built without oneDNN (CTUNE_WITH_DNNL unset), available() is false and the callers keep ATen's
// matmuls: docs/performance.md#the-kernels.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cstdint>

namespace ctune::ops::cpu_gemm {

// Whether the GEMMs run (a build with oneDNN; where not, the callers keep ATen's matmuls), and
// whether oneDNN's bf16 GEMM runs natively here (bf16 or AVX-512 instructions, not AVX2 alone).
// Where it does not, the bf16 gemm below widens its operands to fp32 and runs the fp32 one: the
// same products (bf16 is exact in fp32) and sums, at the cost of the copies, fine for the tiled
// attention's cache-sized tiles.
bool available();
bool bf16_available();

// C[M, N] = alpha · op(A) · op(B) + beta · C, with op(X) = Xᵀ when trans_x; lda, ldb, ldc are
// row strides in elements.
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const c10::BFloat16* A,
          std::int64_t lda, const c10::BFloat16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);

// Whether weight_grad_fp32 serves bf16 operands on `device` with `compute` matmuls: a CPU build
// with oneDNN whose bf16 GEMM runs natively on this CPU (widening the head's whole [rows, V]
// gradient would not pay), bf16 compute.
bool fp32_weight_grads(at::Device device, at::ScalarType compute);

// dw (fp32 [out, in], contiguous) = dyᵀ x, plus dw when `accumulate`: dy [rows, out] and x
// [rows, in] in bf16, the products accumulated in fp32 inside one GEMM (no bf16 [out, in]
// product beside the accumulator, no separate add pass). False, with dw untouched, where this
// build or these operands cannot; the caller then keeps ATen's matmul.
//
// Not used for the projections' weight gradients, though oneDNN's GEMM alone runs their shapes
// 15-25% faster than ATen's matmul: it mallocs its packing buffers on every call, and under the
// tensor pool's fixed 256 KiB mmap threshold (ops/tensor_pool.h) glibc maps them afresh each time.
// The page faults made a [576, 1536] x 2048-row gradient about 2x slower inside the step; the
// head's chunks (49152 rows of output) amortise them (docs/performance.md, "What is left").
bool weight_grad_fp32(at::Tensor& dw, const at::Tensor& dy, const at::Tensor& x, bool accumulate);

// While alive, the GEMMs this thread calls outside a parallel region run on it alone: oneDNN
// spreads a GEMM over this thread's OpenMP thread count, which this sets to 1 (and restores).
// For a kernel that runs its tasks on the calling thread (the tiled attention of a decoding
// step): each tiny GEMM would otherwise open a parallel region of its own. ATen's parallel_for
// reads the same count, so nothing inside should expect other threads.
class OnThisThread {
 public:
  OnThisThread();
  ~OnThisThread();
  OnThisThread(const OnThisThread&) = delete;
  OnThisThread& operator=(const OnThisThread&) = delete;

 private:
  int previous_;
};

}  // namespace ctune::ops::cpu_gemm
