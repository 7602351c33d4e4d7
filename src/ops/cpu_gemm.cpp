#include "ops/cpu_gemm.h"

#include <c10/util/Exception.h>

#if CTUNE_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>

// oneDNN exports its bf16 GEMM (bf16 operands, fp32 accumulation and result) from the library
// but declares it only in its own tests; the signature is that of dnnl_sgemm with bf16 operands
// (oneDNN's src/common/gemm.cpp). oneDNN's bfloat16_t is a 16-bit value as c10::BFloat16 is.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const std::uint16_t* A, dnnl_dim_t lda, const std::uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);
#endif

namespace ctune::ops::tile_gemm {

#if CTUNE_WITH_DNNL
static_assert(sizeof(c10::BFloat16) == sizeof(std::uint16_t), "c10::BFloat16 is the 16-bit bf16 pattern");

namespace {
char op(bool trans) { return trans ? 'T' : 'N'; }
void check(dnnl_status_t status, const char* what) { TORCH_CHECK(status == dnnl_success, "oneDNN ", what, " failed: status ", static_cast<int>(status)); }
}  // namespace

bool available() { return true; }

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  check(dnnl_sgemm(op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), "sgemm");
}

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const c10::BFloat16* A,
          std::int64_t lda, const c10::BFloat16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  check(dnnl_gemm_bf16bf16f32(op(trans_a), op(trans_b), M, N, K, alpha, reinterpret_cast<const std::uint16_t*>(A), lda,
                              reinterpret_cast<const std::uint16_t*>(B), ldb, beta, C, ldc),
        "bf16 gemm");
}
#else
bool available() { return false; }

void gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*, std::int64_t, float,
          float*, std::int64_t) {
  TORCH_CHECK(false, "ctune was built without oneDNN: no tile GEMM");
}

void gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const c10::BFloat16*, std::int64_t, const c10::BFloat16*,
          std::int64_t, float, float*, std::int64_t) {
  TORCH_CHECK(false, "ctune was built without oneDNN: no tile GEMM");
}
#endif

}  // namespace ctune::ops::tile_gemm
