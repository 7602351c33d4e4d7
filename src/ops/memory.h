// The memory a process uses, measured: for training (the ledger's measured figures, the step
// line) and inference (generate's peak) alike, so it lives below both.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace ctune::ops {

// Resident memory of this process now, and its high-water mark since the last reset (bytes,
// from /proc/self/status), and the reset (Linux clear_refs), so a run's measured peak covers
// training, not loading.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();
void reset_peak_resident();

// The memory a run's ledger describes and its metrics report, where the model lives: on the CPU
// the process's resident memory (above); on a GPU the bytes its allocator hands out (as
// torch.cuda.memory_allocated and max_memory_allocated count them), which is where the
// weights, gradients, optimizer state and activations are.
std::int64_t memory_now(const at::Device& device);
std::int64_t peak_memory(const at::Device& device);
void reset_peak_memory(const at::Device& device);

}  // namespace ctune::ops
