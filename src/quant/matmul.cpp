#include "quant/matmul.h"

namespace ctune::quant {

namespace {

// a2: [m, k], b2: [k, n] (any strides) -> [m, n] in a2's dtype.
at::Tensor mm_in_dtype(const at::Tensor& a2, const at::Tensor& b2) {
  TORCH_CHECK(a2.scalar_type() == b2.scalar_type(), "quant matmul: operand dtypes differ (", a2.scalar_type(), " vs ",
              b2.scalar_type(), ")");
  if (a2.scalar_type() == at::kHalf && a2.device().is_cpu()) {
    return at::mm(a2.to(at::kFloat), b2.to(at::kFloat)).to(at::kHalf);
  }
  return at::mm(a2, b2);
}

std::vector<std::int64_t> with_last(at::IntArrayRef sizes, std::int64_t last) {
  std::vector<std::int64_t> out(sizes.begin(), sizes.end());
  out.back() = last;
  return out;
}

}  // namespace

at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(1), "matmul_nt: a ", a.sizes(), " · bᵀ with b ",
              b.sizes(), " (need a[.., k], b[n, k])");
  auto out = mm_in_dtype(a.reshape({-1, a.size(-1)}), b.t());
  return out.view(with_last(a.sizes(), b.size(0)));
}

at::Tensor matmul_nn(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(0), "matmul_nn: a ", a.sizes(), " · b with b ",
              b.sizes(), " (need a[.., n], b[n, k])");
  auto out = mm_in_dtype(a.reshape({-1, a.size(-1)}), b);
  return out.view(with_last(a.sizes(), b.size(1)));
}

}  // namespace ctune::quant
