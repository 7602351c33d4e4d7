// Micro-benchmark of the attention core on CPU: one layer's forward + backward through
// ops::attention_core (blocked kernel, causal mask) against the batched matmuls alone that the
// blocked kernel runs (the same shapes, no sweeps or copies) and a 2048³ GEMM of the same dtype
// measured in the same process. Medians of repeated runs; prints GFLOP/s of the causal blocks'
// matmul FLOPs for each. Not part of ctest: used to measure docs/performance.md's attention row.
//   bench_attention [threads=2] [B=4] [heads=9] [kv_heads=3] [T=512] [d=64] [reps=15]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_timing.h"
#include "ops/attention.h"

using ctune::bench::arg;
using ctune::bench::median_ms;

int main(int argc, char** argv) {
  const auto threads = arg(argc, argv, 1, 2), B = arg(argc, argv, 2, 4), h = arg(argc, argv, 3, 9),
             hkv = arg(argc, argv, 4, 3), T = arg(argc, argv, 5, 512), d = arg(argc, argv, 6, 64);
  const int reps = static_cast<int>(arg(argc, argv, 7, 15));
  at::set_num_threads(static_cast<int>(threads));
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  at::manual_seed(0);

  auto a = at::randn({2048, 2048}, bf16), b = at::randn({2048, 2048}, bf16);
  const double gemm_ms = median_ms([&] { at::mm(a, b); }, 5);
  const double gemm_gflops = 2.0 * 2048 * 2048 * 2048 / gemm_ms / 1e6;

  auto q = at::randn({B, h, T, d}, bf16).requires_grad_(true);
  auto k = at::randn({B, hkv, T, d}, bf16).requires_grad_(true);
  auto v = at::randn({B, hkv, T, d}, bf16).requires_grad_(true);
  auto mask = at::ones({T, T}, at::kBool).tril().view({1, 1, T, T});
  auto grad = at::randn({B, h, T, d}, bf16);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  // The causal blocks' matmul FLOPs: per block of m queries, keys up to the block's end.
  double pairs = 0;
  for (std::int64_t q0 = 0; q0 < T; q0 += ctune::ops::kBlockQueries)
    pairs += static_cast<double>(std::min(ctune::ops::kBlockQueries, T - q0)) * std::min(T, q0 + ctune::ops::kBlockQueries);
  const double mm_flop = 2.0 * B * h * pairs * d;  // one [queries, keys, d] product

  const double fwd_ms = median_ms(
      [&] {
        at::NoGradGuard no_grad;
        ctune::ops::attention_core(q, k, v, mask, scale, ctune::ops::AttentionKernel::blocked);
      },
      reps);
  const double step_ms = median_ms(
      [&] {
        auto out = ctune::ops::attention_core(q, k, v, mask, scale, ctune::ops::AttentionKernel::blocked);
        torch::autograd::grad({out}, {q, k, v}, {grad});
      },
      reps);

  // The blocked kernel's matmuls alone: per block, 2 forward and 5 backward products.
  const auto g = h / hkv;
  std::vector<std::array<at::Tensor, 3>> blocks;  // q-like [B, hkv, g m, d], k-like [B, hkv, n, d], p-like [B, hkv, g m, n]
  for (std::int64_t q0 = 0; q0 < T; q0 += ctune::ops::kBlockQueries) {
    const auto m = std::min(ctune::ops::kBlockQueries, T - q0), n = std::min(T, q0 + ctune::ops::kBlockQueries);
    blocks.push_back({at::randn({B, hkv, g * m, d}, bf16), at::randn({B, hkv, n, d}, bf16), at::randn({B, hkv, g * m, n}, bf16)});
  }
  const double mm_ms = median_ms(
      [&] {
        for (auto& blk : blocks) {
          auto &x = blk[0], &y = blk[1], &p = blk[2];
          at::matmul(x, y.transpose(2, 3));  // S (forward), S again and dP (backward)
          at::matmul(x, y.transpose(2, 3));
          at::matmul(x, y.transpose(2, 3));
          at::matmul(p, y);                  // out (forward), dq (backward)
          at::matmul(p, y);
          at::matmul(p.transpose(2, 3), x);  // dk, dv
          at::matmul(p.transpose(2, 3), x);
        }
      },
      reps);

  std::printf("shape B=%ld h=%ld hkv=%ld T=%ld d=%ld threads=%ld; bf16 GEMM 2048^3 %.1f GFLOP/s\n", (long)B, (long)h, (long)hkv,
              (long)T, (long)d, (long)threads, gemm_gflops);
  std::printf("forward            %8.2f ms  %6.1f GFLOP/s\n", fwd_ms, 2 * mm_flop / fwd_ms / 1e6);
  std::printf("forward+backward   %8.2f ms  %6.1f GFLOP/s  (%.0f%% of the GEMM)\n", step_ms, 7 * mm_flop / step_ms / 1e6,
              100.0 * 7 * mm_flop / step_ms / 1e6 / gemm_gflops);
  std::printf("its 7 matmuls only %8.2f ms  %6.1f GFLOP/s\n", mm_ms, 7 * mm_flop / mm_ms / 1e6);
  return 0;
}
