// Not run by ctest: one decoding step's matrix-vector products on the SmolLM2-135M shape (30
// layers of q, k, v, o, gate, up, down, then the tied head), each weight read once, through
// ops::row_product against ATen's mv (OpenBLAS sgemv), interleaved; prints the read rate of
// each. Usage: bench_row_product [threads] [reps] [dtype: fp32|bf16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/row_product.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const bool bf16 = argc > 3 && std::string(argv[3]) == "bf16";
  at::set_num_threads(threads);
  at::NoGradGuard no_grad;
  const std::int64_t H = 576, I = 1536, kv = 192, V = 49152, L = 30;
  std::vector<at::Tensor> weights;
  for (std::int64_t l = 0; l < L; ++l) {
    for (const auto& [n, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{H, H}, {kv, H}, {kv, H}, {H, H}, {I, H}, {I, H}, {H, I}}) {
      weights.push_back(at::randn({n, k}).to(bf16 ? at::kBFloat16 : at::kFloat));
    }
  }
  weights.push_back(at::randn({V, H}).to(bf16 ? at::kBFloat16 : at::kFloat));
  double bytes = 0;
  for (const auto& w : weights) bytes += static_cast<double>(w.nbytes());
  const auto xh = at::randn({H}), xi = at::randn({I});
  auto step = [&](bool ours) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& w : weights) {
      const auto& x = w.size(1) == H ? xh : xi;
      if (ours) {
        (void)ctune::ops::row_product(x, w, at::Tensor());
      } else {
        (void)at::mv(w.to(at::kFloat), x);  // bf16: widened first, as ATen would need
      }
    }
    return seconds_since(t0);
  };
  step(true), step(false);  // first touch
  std::vector<double> ours, aten;
  for (int r = 0; r < reps; ++r) {
    ours.push_back(step(true));
    if (!bf16) aten.push_back(step(false));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%s, %d threads, %.0f MB a step: row_product %.2f ms (%.1f GB/s)", bf16 ? "bf16" : "fp32", threads, bytes / 1e6,
              median(ours) * 1e3, bytes / median(ours) / 1e9);
  if (!bf16) std::printf(", at::mv %.2f ms (%.1f GB/s)", median(aten) * 1e3, bytes / median(aten) / 1e9);
  std::printf("\n");
  return 0;
}
