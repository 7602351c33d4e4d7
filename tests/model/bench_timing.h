// What the micro-benchmarks beside it share (bench_attention, bench_gated_delta): the median
// wall time of repeated runs after one warm-up, and positional integer arguments.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <vector>

namespace ctune::bench {

inline double median_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// argv[i] as an integer, or `fallback` when absent.
inline std::int64_t arg(int argc, char** argv, int i, std::int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; }

}  // namespace ctune::bench
