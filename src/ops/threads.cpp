#include "ops/threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/progress.h"
#include "core/threads.h"
#include "ops/resident.h"

namespace ctune::ops {

namespace {

// glibc gives each thread that allocates an arena of its own (up to 8 per core), reserving 64 MiB
// of address space for it (HEAP_MAX_SIZE on 64-bit).
constexpr std::int64_t kMallocArenaBytes = std::int64_t{64} << 20;

std::int64_t default_stack_bytes() {
  pthread_attr_t attr;
  std::size_t size = 8u << 20;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
  }
  return static_cast<std::int64_t>(size);
}

// The most threads whose reservations this process already holds (use_threads ran for them).
int g_reserved_for = 0;

// Every thread allocates and runs a product, so each holds its arena, its stack and its BLAS
// buffer now; the single-row product takes the calling thread's buffer too.
void reserve_on_every_thread(int threads) {
  at::parallel_for(0, threads, 1, [](std::int64_t, std::int64_t) { std::free(std::malloc(64)); });
  const auto a = at::rand({256, 256});
  (void)at::mm(a, a);
  (void)at::mm(a.narrow(0, 0, 1), a);
}

}  // namespace

std::int64_t step_runtime_bytes(bool cpu, int threads) {
  // Measured on an AMD EPYC (AVX2) with OpenBLAS 0.3.21, a 56M and a 95M-parameter Llama, LoRA
  // and full, with and without recompute: code paged in 8.8-8.9 MB; anonymous memory outside the
  // pool 7.5-8.7 MB with 1 thread, 8.8-10.2 MB with 2.
  constexpr std::int64_t kCode = 9000000, kScratch = 6000000, kPerThread = 1500000;
  return cpu ? kCode + kScratch + kPerThread * std::max(1, threads) : 0;
}

std::int64_t per_thread_reservation() { return kBlasBufferBytes + kMallocArenaBytes + default_stack_bytes(); }

void use_threads(int threads) {
  const auto limit = address_space_limit();
  if (limit && threads > g_reserved_for) {
    // At most: a buffer, an arena and a stack per thread, and the caller's buffer, less the
    // buffers OpenBLAS reserved at start.
    const std::int64_t new_buffers = std::max(0, threads - blas_threads_at_start()) + 1;
    const std::int64_t need = new_buffers * kBlasBufferBytes + threads * (kMallocArenaBytes + default_stack_bytes());
    const std::int64_t mapped = mapped_bytes();
    if (mapped + need > *limit) {
      throw MemoryError(std::to_string(threads) + " threads need up to " + format_bytes(need) +
                        " of address space (per thread a 128 MiB OpenBLAS buffer, a 64 MiB malloc arena and its stack), past the " +
                        format_bytes(*limit - mapped) + " left of the " + format_bytes(*limit) + " of " + kAddressSpaceLimit + " (" +
                        format_bytes(mapped) + " mapped already); use fewer threads or raise the limit");
    }
  }
  at::set_num_threads(threads);
  if (limit && threads > g_reserved_for) {
    reserve_on_every_thread(threads);
    g_reserved_for = threads;
  }
}

}  // namespace ctune::ops
