// The intra-op threads of the compute runtimes (LibTorch's OpenMP pool, which OpenBLAS and
// oneDNN run on too), set in one place so that what they reserve is known before a model is
// loaded (docs/planning.md, "Running out of memory").
#pragma once

#include <cstdint>

namespace ctune::ops {

// Sets the intra-op thread count. Under an address-space limit (ulimit -v) it first checks that
// the runtimes' per-thread reservations fit (an OpenBLAS work buffer of 128 MiB, a malloc arena
// of 64 MiB and a stack per thread: OpenBLAS spins forever when its mmap fails, and a failed
// arena or stack ends the process unexplained) and throws MemoryError in one line when they do
// not; then it runs one product on every thread, so the reservations are mapped now and every
// later check counts them. Without a limit it only sets the count: the runtimes reserve lazily.
void use_threads(int threads);

// What the runtimes reserve per thread, for the line above and its test (bytes).
std::int64_t per_thread_reservation();

// What a training step adds to a CPU process outside its tensors, which the memory ledger
// counts beside them: the code of the step's kernels, paged in at their first call (LibTorch's
// backward kernels, OpenBLAS's), and the runtimes' scratch outside the tensor pool (OpenBLAS's
// packing buffers, per-thread malloc arenas). Measured, not derived: 15 MB and 1.5 MB a thread
// (docs/formats.md#memory-formulas). 0 on a GPU, whose ledger counts the device's memory.
std::int64_t step_runtime_bytes(bool cpu, int threads);

}  // namespace ctune::ops
