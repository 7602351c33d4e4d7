#include "core/threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace ctune {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int blas_threads_at_start() {
  int n = available_cores();
  for (const char* name : {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* value = std::getenv(name);
    const long set_to = value ? std::atol(value) : 0;
    if (set_to > 0) return std::min<int>(n, static_cast<int>(std::min<long>(set_to, 1 << 20)));
  }
  return n;
}

int parse_thread_count(const std::string& value, const std::string& where) {
  if (value == "auto") return available_cores();
  std::size_t used = 0;
  long n = -1;
  try {
    n = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || n < 1 || n > 4096) {
    throw ConfigError(where + ": expected \"auto\" or a thread count in 1..4096, found \"" + value +
                      "\"");
  }
  return static_cast<int>(n);
}

}  // namespace ctune
