// Micro-benchmark of the quantised Linear forward on CPU: bf16 GEMM (baseline) against int8 with
// the Dequantize kernel, int8 with the oneDNN int8 GEMM (LLM.int8 threshold 6, activations with
// two outlier columns), and NF4 (+double quant) dequantised to bf16. Median of repeated runs,
// 2 threads by default (argv[1] overrides). Not part of ctest: scripts/bench_quant.sh runs it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "ops/compute.h"
#include "quant/int8.h"
#include "quant/nf4.h"

using namespace ctune::quant;

namespace {

double median_ms(const std::function<at::Tensor()>& fn, int reps) {
  fn();  // warm-up (and the int8 prepack)
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto y = fn();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  at::set_num_threads(threads);
  at::NoGradGuard no_grad;
  struct Shape { std::int64_t tokens, in, out; };
  const std::vector<Shape> shapes = {{512, 576, 1536}, {512, 2048, 8192}, {2048, 4096, 4096}};
  std::printf("threads %d, int8 GEMM available: %s\n", at::get_num_threads(), int8_gemm_available() ? "yes" : "no");
  std::printf("%-22s %9s %9s %6s %9s %6s %9s %6s %9s %9s\n", "shape (T x in->out)", "bf16 ms", "i8deq ms", "x", "i8gemm ms",
              "x", "nf4 ms", "x", "deq8 ms", "deq4 ms");
  for (const auto& s : shapes) {
    auto gen = at::detail::createCPUGenerator(7);
    auto w = (at::randn({s.out, s.in}, gen, at::kFloat) * 0.02).to(at::kBFloat16);
    auto x = at::randn({s.tokens, s.in}, gen, at::kFloat);
    x.select(1, 5).mul_(8.0);  // two outlier columns for LLM.int8
    x.select(1, 17).mul_(8.0);
    x = x.to(at::kBFloat16);
    const int reps = s.tokens * s.in * s.out > 8'000'000'000LL ? 5 : 10;
    auto q8 = quantize_int8(w);
    auto q4 = quantize_nf4(w, 64, true);
    const double bf16 = median_ms([&] { return ctune::ops::matmul_nt(x, w); }, reps);
    const double i8deq = median_ms([&] { return int8_matmul(x, q8, 6.0, Int8Kernel::Dequantize); }, reps);
    const double i8gemm =
        int8_gemm_available() ? median_ms([&] { return int8_matmul(x, q8, 6.0, Int8Kernel::Int8Gemm); }, reps) : -1;
    const double nf4 = median_ms([&] { return ctune::ops::matmul_nt(x, dequantize(q4, at::kBFloat16)); }, reps);
    const double deq8 = median_ms([&] { return dequantize(q8, at::kBFloat16); }, reps);
    const double deq4 = median_ms([&] { return dequantize(q4, at::kBFloat16); }, reps);
    char label[64];
    std::snprintf(label, sizeof label, "%lld x %lld->%lld", (long long)s.tokens, (long long)s.in, (long long)s.out);
    std::printf("%-22s %9.2f %9.2f %6.2f %9.2f %6.2f %9.2f %6.2f %9.2f %9.2f\n", label, bf16, i8deq, i8deq / bf16, i8gemm,
                i8gemm / bf16, nf4, nf4 / bf16, deq8, deq4);
  }
  return 0;
}
