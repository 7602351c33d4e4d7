// Thread-count policy (torch-free): LibTorch picks 1 thread on some machines, so ctune always
// sets the count explicitly, defaulting to the cores this process may run on.
#pragma once

#include <cstdint>
#include <string>

namespace ctune {

// OpenBLAS (LibTorch's fp32 GEMM here) reserves one work buffer per thread, and one more for the
// calling thread at its first product: 128 MiB of address space each on x86-64 (its
// BUFFER_SIZE; measured as 131,072 kB anonymous mappings). It reserves buffers for
// blas_threads_at_start() threads in its constructor, before main, and more when LibTorch's
// thread count exceeds them. A failed mmap there is retried forever (docs/planning.md,
// "Running out of memory").
inline constexpr std::int64_t kBlasBufferBytes = std::int64_t{128} << 20;
// The threads OpenBLAS counts at start: the cores this process may run on, unless
// OPENBLAS_NUM_THREADS (or GOTO_NUM_THREADS, or OMP_NUM_THREADS) is set lower. Plain libc only:
// the executable's start-up calls it before any library constructor (cli/process_start.cpp).
int blas_threads_at_start();

// Cores available to this process (sched affinity), at least 1.
int available_cores();

// Parses a thread setting: "auto" -> available_cores(); an integer in 1..4096 -> itself.
// Throws ConfigError naming `where` otherwise.
int parse_thread_count(const std::string& value, const std::string& where);

}  // namespace ctune
