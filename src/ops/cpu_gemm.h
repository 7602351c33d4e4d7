// Single-threaded GEMMs on raw CPU buffers, for kernels that split their own work over ATen's
// thread pool and keep each task's operands in the core's cache (the tiled attention,
// ops/attention_tiled.h). They are oneDNN's GEMMs, the library LibTorch's own CPU matmuls run
// on: called inside at::parallel_for, oneDNN computes on the calling thread. Row-major, C in fp32,
// alpha and beta as in BLAS. Built without oneDNN (CTUNE_WITH_DNNL unset), available() is false
// and the callers keep ATen's batched matmuls: docs/performance.md#the-kernels.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace ctune::ops::tile_gemm {

bool available();

// C[M, N] = alpha · op(A) · op(B) + beta · C, with op(X) = Xᵀ when trans_x; lda, ldb, ldc are
// row strides in elements.
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const c10::BFloat16* A,
          std::int64_t lda, const c10::BFloat16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);

}  // namespace ctune::ops::tile_gemm
