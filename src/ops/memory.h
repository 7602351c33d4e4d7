// The memory a process uses, measured: for training (the ledger's measured figures, the step
// line) and inference (generate's peak) alike, so it lives below both.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

#include "ops/resident.h"

namespace ctune::ops {


// The memory a run's ledger describes and its metrics report, where the model lives: on the CPU
// the process's resident memory (above); on a GPU the bytes its allocator hands out (as
// torch.cuda.memory_allocated and max_memory_allocated count them), which is where the
// weights, gradients, optimizer state and activations are.
std::int64_t memory_now(const at::Device& device);
std::int64_t peak_memory(const at::Device& device);
void reset_peak_memory(const at::Device& device);

// memory.limit: the most a run may hold of the memory memory_now counts (0: no limit). On the
// CPU the tensor pool refuses a tensor that would take resident memory past it
// (c10::OutOfMemoryError, which training explains in one line) where the kernel's OOM killer
// would end the process without a word, or another process with it; on a GPU the caching
// allocator's memory fraction of the device holds it.
void set_memory_limit(const at::Device& device, std::int64_t bytes);

}  // namespace ctune::ops
