// Micro-benchmark of the gated delta rule on CPU (ops/gated_delta.h): one layer's forward and
// forward + backward in fp32, the per-head kernel and the batched form, against the causal
// attention core (blocked kernel) of the same width, and a 2048³ fp32 GEMM, measured in the same
// process. Medians of repeated runs. Not part
// of ctest: issue 65's "a GDN layer's core at 2048 tokens against a full-attention layer's".
//   bench_gated_delta [threads=2] [B=1] [T=2048] [heads=16] [d=128] [chunk=64] [reps=5]
// With CTUNE_BENCH_TRACE=file, one more forward + backward of the delta rule is recorded there as
// a Chrome trace (ATen's operators; for where the time goes).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_timing.h"
#include "ops/attention.h"
#include "ops/gated_delta.h"

using ctune::bench::arg;
using ctune::bench::median_ms;

int main(int argc, char** argv) {
  const auto threads = arg(argc, argv, 1, 2), B = arg(argc, argv, 2, 1), T = arg(argc, argv, 3, 2048), H = arg(argc, argv, 4, 16),
             d = arg(argc, argv, 5, 128), chunk = arg(argc, argv, 6, 64);
  const int reps = static_cast<int>(arg(argc, argv, 7, 5));
  at::set_num_threads(static_cast<int>(threads));
  at::manual_seed(0);

  auto a = at::randn({2048, 2048}), b = at::randn({2048, 2048});
  const double gemm_ms = median_ms([&] { at::mm(a, b); }, 5);
  const double gemm_gflops = 2.0 * 2048 * 2048 * 2048 / gemm_ms / 1e6;

  auto q = at::randn({B, T, H, d}).requires_grad_(true), k = at::randn({B, T, H, d}).requires_grad_(true);
  auto v = at::randn({B, T, H, d}).requires_grad_(true);
  auto g = (-at::softplus(at::randn({B, T, H})) * 0.5).requires_grad_(true);
  auto beta = at::sigmoid(at::randn({B, T, H})).requires_grad_(true);
  auto grad = at::randn({B, T, H, d});
  const auto gdn_fwd_ms = [&] {
    return median_ms(
        [&] {
          at::NoGradGuard no_grad;
          ctune::ops::gated_delta_rule(q, k, v, g, beta, {}, {}, false, chunk);
        },
        reps);
  };
  const auto gdn_step_ms = [&] {
    return median_ms(
        [&] {
          auto r = ctune::ops::gated_delta_rule(q, k, v, g, beta, {}, {}, false, chunk);
          torch::autograd::grad({r.out}, {q, k, v, g, beta}, {grad});
        },
        reps);
  };
  // The batched form first (ops/gated_delta.h), then the per-head kernel where it runs.
  ctune::ops::use_gated_delta_kernel(false);
  const double batched_fwd = gdn_fwd_ms(), batched_step = gdn_step_ms();
  ctune::ops::use_gated_delta_kernel(true);
  const double gdn_fwd = gdn_fwd_ms(), gdn_step = gdn_step_ms();

  if (const char* trace = std::getenv("CTUNE_BENCH_TRACE")) {
    torch::autograd::profiler::RecordProfile guard(trace);
    auto r = ctune::ops::gated_delta_rule(q, k, v, g, beta, {}, {}, false, chunk);
    torch::autograd::grad({r.out}, {q, k, v, g, beta}, {grad});
  }

  // The attention core of the same width: [B, h, T, d], causal.
  auto qa = q.detach().transpose(1, 2).contiguous().requires_grad_(true), ka = k.detach().transpose(1, 2).contiguous().requires_grad_(true);
  auto va = v.detach().transpose(1, 2).contiguous().requires_grad_(true);
  auto ga = grad.transpose(1, 2).contiguous();
  auto mask = at::ones({T, T}, at::kBool).tril().view({1, 1, T, T});
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double att_fwd = median_ms(
      [&] {
        at::NoGradGuard no_grad;
        ctune::ops::attention_core(qa, ka, va, mask, scale, ctune::ops::AttentionKernel::blocked);
      },
      reps);
  const double att_step = median_ms(
      [&] {
        auto out = ctune::ops::attention_core(qa, ka, va, mask, scale, ctune::ops::AttentionKernel::blocked);
        torch::autograd::grad({out}, {qa, ka, va}, {ga});
      },
      reps);

  std::printf("shape B=%ld T=%ld heads=%ld d=%ld chunk=%ld threads=%ld; fp32 GEMM 2048^3 %.1f GFLOP/s\n", (long)B, (long)T, (long)H,
              (long)d, (long)chunk, (long)threads, gemm_gflops);
  std::printf("gated delta rule   forward %8.2f ms   forward+backward %8.2f ms%s\n", gdn_fwd, gdn_step,
              ctune::ops::gated_delta_kernel_applies(at::kCPU) ? " (per-head kernel)" : " (batched: no kernel in this build)");
  std::printf("  batched form     forward %8.2f ms   forward+backward %8.2f ms\n", batched_fwd, batched_step);
  std::printf("attention (causal) forward %8.2f ms   forward+backward %8.2f ms\n", att_fwd, att_step);
  std::printf("ratio gated delta / attention: forward %.2f, forward+backward %.2f\n", gdn_fwd / att_fwd, gdn_step / att_step);
  return 0;
}
