// The memory a process uses, measured: for training (the ledger's measured figures, the step
// line) and inference (generate's peak) alike, so it lives below both.
#pragma once

#include <cstdint>
#include <string>

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

// What a step about to allocate on the host adds to the process: `resident` bytes it will write
// (new memory; pages of mapped files are not counted) and `address` bytes of address space it
// will reserve (its allocations, touched or not, and files it maps).
struct HostNeed {
  std::int64_t resident = 0;
  std::int64_t address = 0;
};
// When `need` plus what the process already holds passes a bound of its kind (resident_capacity
// with its anonymous resident memory, address_space_limit with its mapped bytes; the tensor
// pool's free ranges, which new tensors reuse, not counted as held): "<what> needs <N> of new
// memory (<detail>), past the <M> left of the <C> of <source> (<H> held already)"; `detail` says
// what the bytes are. Empty when it fits.
std::string host_memory_shortfall(const std::string& what, const HostNeed& need, const std::string& detail);
// Throws MemoryError with the shortfall's line when there is one.
void require_host_memory(const std::string& what, const HostNeed& need, const std::string& detail);

}  // namespace ctune::ops
