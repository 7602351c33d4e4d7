#include "model/precision.h"

namespace ctune::model {

namespace {
bool half_on_cpu(const at::Tensor& t) { return t.scalar_type() == at::kHalf && t.device().is_cpu(); }

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  return !t.defined() || dtype == at::ScalarType::Undefined || t.scalar_type() == dtype ? t : t.to(dtype);
}
}  // namespace

at::Tensor linear_in(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::ScalarType dtype) {
  auto xc = cast(x, dtype), wc = cast(weight, dtype), bc = cast(bias, dtype);
  if (half_on_cpu(wc)) {
    auto b32 = bc.defined() ? bc.to(at::kFloat) : bc;
    return at::linear(xc.to(at::kFloat), wc.to(at::kFloat), b32).to(at::kHalf);
  }
  return at::linear(xc, wc, bc);
}

at::Tensor matmul_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype) {
  auto ac = cast(a, dtype), bc = cast(b, dtype);
  if (half_on_cpu(ac) || half_on_cpu(bc)) return at::matmul(ac.to(at::kFloat), bc.to(at::kFloat)).to(at::kHalf);
  return at::matmul(ac, bc);
}

at::Tensor silu_any(const at::Tensor& x) {
  return half_on_cpu(x) ? at::silu(x.to(at::kFloat)).to(at::kHalf) : at::silu(x);
}

at::Tensor dropout_any(const at::Tensor& x, double p, bool train) {
  return half_on_cpu(x) ? at::dropout(x.to(at::kFloat), p, train).to(at::kHalf) : at::dropout(x, p, train);
}

}  // namespace ctune::model
