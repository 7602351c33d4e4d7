#include "ops/compute.h"

#include <cstdlib>
#include <vector>

namespace ctune::ops {

std::int64_t gemm_kernel_cache_bytes(at::Device device, at::ScalarType compute) {
  if (!device.is_cpu() || compute != at::kBFloat16) return 0;
  std::int64_t capacity = 1024;  // oneDNN's default
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0) capacity = n;
      break;
    }
  }
  return capacity * kGemmKernelBytes;
}

namespace {

// The CPU fp16 rule (compute.h): such a tensor's operation runs in fp32 and rounds back.
bool half_on_cpu(const at::Tensor& t) { return t.defined() && t.scalar_type() == at::kHalf && t.device().is_cpu(); }

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  return !t.defined() || dtype == at::ScalarType::Undefined || t.scalar_type() == dtype ? t : t.to(dtype);
}

at::Tensor fp32(const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; }

// a2: [m, k], b2: [k, n] (any strides) -> [m, n] in a2's dtype.
at::Tensor mm_same_dtype(const at::Tensor& a2, const at::Tensor& b2) {
  TORCH_CHECK(a2.scalar_type() == b2.scalar_type(), "matmul: operand dtypes differ (", a2.scalar_type(), " vs ",
              b2.scalar_type(), ")");
  if (half_on_cpu(a2)) return at::mm(fp32(a2), fp32(b2)).to(at::kHalf);
  return at::mm(a2, b2);
}

std::vector<std::int64_t> with_last(at::IntArrayRef sizes, std::int64_t last) {
  std::vector<std::int64_t> out(sizes.begin(), sizes.end());
  out.back() = last;
  return out;
}

}  // namespace

at::Tensor linear_in(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::ScalarType dtype) {
  auto xc = cast(x, dtype), wc = cast(weight, dtype), bc = cast(bias, dtype);
  if (half_on_cpu(wc)) return at::linear(fp32(xc), fp32(wc), fp32(bc)).to(at::kHalf);
  // One row (decoding one sequence): a matrix-vector product streams the weight once, where
  // BLAS gemm with a single row first packs a copy of the whole weight; measured about 2x on
  // the decode step (README "Performance", Decode).
  const auto& t = wc.scalar_type();
  if (xc.dim() >= 1 && xc.numel() == xc.size(-1) && xc.is_cpu() && (t == at::kFloat || t == at::kDouble) && xc.scalar_type() == t) {
    const auto v = xc.reshape({-1});
    const auto y = bc.defined() ? at::addmv(bc, wc, v) : at::mv(wc, v);
    return y.view(with_last(xc.sizes(), wc.size(0)));
  }
  return at::linear(xc, wc, bc);
}

at::Tensor matmul_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype) {
  auto ac = cast(a, dtype), bc = cast(b, dtype);
  if (half_on_cpu(ac) || half_on_cpu(bc)) return at::matmul(fp32(ac), fp32(bc)).to(at::kHalf);
  return at::matmul(ac, bc);
}

at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(1), "matmul_nt: a ", a.sizes(), " · bᵀ with b ",
              b.sizes(), " (need a[.., k], b[n, k])");
  return mm_same_dtype(a.reshape({-1, a.size(-1)}), b.t()).view(with_last(a.sizes(), b.size(0)));
}

at::Tensor matmul_nn(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(0), "matmul_nn: a ", a.sizes(), " · b with b ",
              b.sizes(), " (need a[.., n], b[n, k])");
  return mm_same_dtype(a.reshape({-1, a.size(-1)}), b).view(with_last(a.sizes(), b.size(1)));
}

at::Tensor silu_any(const at::Tensor& x) { return half_on_cpu(x) ? at::silu(fp32(x)).to(at::kHalf) : at::silu(x); }

at::Tensor gelu_tanh_any(const at::Tensor& x) {
  return half_on_cpu(x) ? at::gelu(fp32(x), "tanh").to(at::kHalf) : at::gelu(x, "tanh");
}

at::Tensor tanh_any(const at::Tensor& x) { return half_on_cpu(x) ? at::tanh(fp32(x)).to(at::kHalf) : at::tanh(x); }

at::Tensor dropout_any(const at::Tensor& x, double p, bool train) {
  return half_on_cpu(x) ? at::dropout(fp32(x), p, train).to(at::kHalf) : at::dropout(x, p, train);
}

}  // namespace ctune::ops
