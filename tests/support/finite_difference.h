// Central finite differences against autograd, for the tests of hand-written backward passes.
// Header-only (it needs ATen; the support library itself is torch-free, as scratch.h is).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace ctune::test {

// The largest |(f(x + eps) - f(x - eps)) / 2 eps - x.grad| over every `stride`-th element of
// each input (float64 leaves whose .grad() a backward of f has filled); f reads the inputs'
// current values. eps = 1e-6 in float64: truncation ~1e-12, rounding ~ u64 |f| / eps.
inline double worst_finite_difference(const std::function<double()>& f, const std::vector<at::Tensor>& inputs, std::int64_t stride = 1,
                                      double eps = 1e-6) {
  double worst = 0;
  for (const auto& x : inputs) {
    auto flat = x.detach().view({-1});
    auto grad = x.grad().view({-1});
    for (std::int64_t i = 0; i < flat.numel(); i += stride) {
      const double saved = flat[i].item<double>();
      flat[i] = saved + eps;
      const double up = f();
      flat[i] = saved - eps;
      const double down = f();
      flat[i] = saved;
      worst = std::max(worst, std::abs((up - down) / (2 * eps) - grad[i].item<double>()));
    }
  }
  return worst;
}

}  // namespace ctune::test
