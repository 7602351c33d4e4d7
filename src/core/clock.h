// The two clocks ctune reads: elapsed seconds on the monotonic clock (step and phase timings)
// and wall-clock Unix seconds (metrics.jsonl "time", TensorBoard wall_time).
#pragma once

#include <chrono>

namespace ctune {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ctune
