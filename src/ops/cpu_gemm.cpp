#include "ops/cpu_gemm.h"

#include <ATen/record_function.h>
#include <omp.h>
#include <c10/util/Exception.h>

#include <vector>

#include "ops/profile_regions.h"

#if CTUNE_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>

// oneDNN exports its bf16 GEMM (bf16 operands, fp32 accumulation and result) from the library
// but declares it only in its own tests; the signature is that of dnnl_sgemm with bf16 operands
// (oneDNN's src/common/gemm.cpp). oneDNN's bfloat16_t is a 16-bit value as c10::BFloat16 is.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const std::uint16_t* A, dnnl_dim_t lda, const std::uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);
#endif

namespace ctune::ops::cpu_gemm {

#if CTUNE_WITH_DNNL
static_assert(sizeof(c10::BFloat16) == sizeof(std::uint16_t), "c10::BFloat16 is the 16-bit bf16 pattern");

namespace {
char op(bool trans) { return trans ? 'T' : 'N'; }
void check(dnnl_status_t status, const char* what) { TORCH_CHECK(status == dnnl_success, "oneDNN ", what, " failed: status ", static_cast<int>(status)); }
}  // namespace

bool available() { return true; }

// oneDNN implements its bf16 GEMM only where the CPU has bf16 or AVX-512 instructions; elsewhere
// (AVX2 alone, as on some AMD EPYC machines) it answers dnnl_unimplemented. Asked once with a
// 1 x 1 x 1 product.
bool bf16_available() {
  static const bool works = [] {
    const std::uint16_t one = 0x3F80;  // 1.0 in bf16
    float c = 0;
    return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.f, &one, 1, &one, 1, 0.f, &c, 1) == dnnl_success && c == 1.f;
  }();
  return works;
}

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  check(dnnl_sgemm(op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), "sgemm");
}

namespace {

// X stored as `rows` rows of `cols` at row stride ld, widened to fp32 into buf (rows of cols).
const float* widen(const c10::BFloat16* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::vector<float>& buf) {
  buf.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) buf[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(x[r * ld + c]);
  return buf.data();
}

}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const c10::BFloat16* A,
          std::int64_t lda, const c10::BFloat16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  if (!bf16_available()) {
    // The same products: bf16 operands are exact in fp32, and oneDNN's bf16 GEMM sums in fp32.
    // Per thread, since the tiled attention calls this from ATen's pool.
    thread_local std::vector<float> a32, b32;
    const std::int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
    const float* a = widen(A, trans_a ? K : M, a_cols, lda, a32);
    const float* b = widen(B, trans_b ? N : K, b_cols, ldb, b32);
    gemm(trans_a, trans_b, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
    return;
  }
  check(dnnl_gemm_bf16bf16f32(op(trans_a), op(trans_b), M, N, K, alpha, reinterpret_cast<const std::uint16_t*>(A), lda,
                              reinterpret_cast<const std::uint16_t*>(B), ldb, beta, C, ldc),
        "bf16 gemm");
}
#else
bool available() { return false; }
bool bf16_available() { return false; }

void gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*, std::int64_t, float,
          float*, std::int64_t) {
  TORCH_CHECK(false, "ctune was built without oneDNN: no tile GEMM");
}

void gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const c10::BFloat16*, std::int64_t, const c10::BFloat16*,
          std::int64_t, float, float*, std::int64_t) {
  TORCH_CHECK(false, "ctune was built without oneDNN: no tile GEMM");
}
#endif

bool fp32_weight_grads(at::Device device, at::ScalarType compute) {
  return device.is_cpu() && compute == at::kBFloat16 && bf16_available();
}

bool weight_grad_fp32(at::Tensor& dw, const at::Tensor& dy, const at::Tensor& x, bool accumulate) {
  const bool operands = dy.scalar_type() == at::kBFloat16 && x.scalar_type() == at::kBFloat16 && dy.is_cpu() && x.is_cpu();
  const bool result = dw.scalar_type() == at::kFloat && dw.is_contiguous();
  const bool shapes = dy.dim() == 2 && x.dim() == 2 && dw.dim() == 2 && dy.size(0) == x.size(0) && dw.size(0) == dy.size(1) &&
                      dw.size(1) == x.size(1);
  if (!fp32_weight_grads(dw.device(), at::kBFloat16) || !operands || !result || !shapes) return false;
  const auto out = dw.size(0), in = dw.size(1), rows = x.size(0);
  if (rows == 0 || out == 0 || in == 0) {
    if (!accumulate) dw.zero_();
    return true;
  }
  const auto a = dy.contiguous(), b = x.contiguous();  // whole rows of a contiguous tensor: no copy
  RECORD_FUNCTION(region::kGemm, std::vector<c10::IValue>({a.t(), b}));
  gemm(/*trans_a=*/true, /*trans_b=*/false, out, in, rows, 1.f, a.data_ptr<c10::BFloat16>(), out, b.data_ptr<c10::BFloat16>(), in,
       accumulate ? 1.f : 0.f, dw.data_ptr<float>(), in);
  return true;
}

OnThisThread::OnThisThread() : previous_(omp_get_max_threads()) { omp_set_num_threads(1); }
OnThisThread::~OnThisThread() { omp_set_num_threads(previous_); }

}  // namespace ctune::ops::cpu_gemm
