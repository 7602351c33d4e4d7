#include "ops/fused_optimizer.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {

// Covered: contiguous fp32 or float64 on the CPU, with the fused operations on.
int covered(const at::Tensor& t) {
  if (!t.defined() || !fused_optimizer_on(t.device()) || !t.is_contiguous()) return -1;
  const int e = elem_index(t.scalar_type());
  return e == kF32 || e == kF64 ? e : -1;
}

constexpr std::int64_t kGrain = 1 << 16;

}  // namespace

bool fused_optimizer_on(const at::Device& device) { return device.is_cpu() && fused_ops_enabled(); }

bool adamw_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const AdamWStep& s) {
  const int e = covered(param);
  if (e < 0 || covered(grad) != e || covered(exp_avg) != e || covered(exp_avg_sq) != e || grad.numel() != param.numel()) return false;
  AdamWArgs a{};
  a.param = param.data_ptr();
  a.grad = grad.data_ptr();
  a.exp_avg = exp_avg.data_ptr();
  a.exp_avg_sq = exp_avg_sq.data_ptr();
  a.decay = 1.0 - s.lr * s.weight_decay;
  a.beta1 = s.beta1;
  a.beta2 = s.beta2;
  a.eps = s.eps;
  a.bias2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(s.step)));
  a.step_size = s.lr / (1.0 - std::pow(s.beta1, static_cast<double>(s.step)));
  const auto kernel = cpu_kernels().adamw[e];
  at::parallel_for(0, param.numel(), kGrain, [&](std::int64_t b, std::int64_t end) { kernel(a, b, end); });
  return true;
}

std::optional<bool> scale_and_check_finite(at::Tensor& x, double scale, bool apply) {
  const int e = covered(x);
  if (e < 0) return std::nullopt;
  const auto kernel = cpu_kernels().scale_check[e];
  void* data = x.data_ptr();
  return at::parallel_reduce(0, x.numel(), kGrain, true,
                             [&](std::int64_t b, std::int64_t end, bool ok) { return kernel(data, scale, apply, b, end) && ok; },
                             [](bool l, bool r) { return l && r; });
}

std::optional<double> sum_of_squares(const at::Tensor& x) {
  const int e = covered(x);
  if (e < 0) return std::nullopt;
  const auto kernel = cpu_kernels().sum_squares[e];
  const void* data = x.data_ptr();
  return at::parallel_reduce(0, x.numel(), kGrain, 0.0,
                             [&](std::int64_t b, std::int64_t end, double acc) { return acc + kernel(data, b, end); },
                             [](double l, double r) { return l + r; });
}

}  // namespace ctune::ops
