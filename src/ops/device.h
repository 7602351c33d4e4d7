// Where tensors live: the recipe's `device` (cpu, or cuda on a CUDA build of LibTorch), and the
// one place that asks an accelerator's allocator what it holds. A CPU build compiles none of the
// CUDA calls (CTUNE_WITH_CUDA unset); docs/gpu.md says how to build and check the CUDA path.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/ATen.h>

namespace ctune::ops {

// "cpu" or "cuda" (or "cuda:N"). Throws ConfigError when this build or machine cannot place
// tensors there: a CPU-only LibTorch, or no such GPU visible.
at::Device parse_device(const std::string& name);

// Whether this binary was built against a LibTorch with CUDA.
bool built_with_cuda();

// The accelerator allocator's high-water mark of allocated bytes since the last reset (what
// torch.cuda.max_memory_allocated reports); 0 on the CPU, whose peak is the process's resident
// high-water mark (train/observe/metrics.h).
std::int64_t device_peak_bytes(const at::Device& device);
std::int64_t device_allocated_bytes(const at::Device& device);  // now
void reset_device_peak(const at::Device& device);
// The accelerator's memory in all (0 on the CPU).
std::int64_t device_total_bytes(const at::Device& device);
// The caching allocator's limit: `bytes` of the device's memory (0: all of it).
void set_device_memory_limit(const at::Device& device, std::int64_t bytes);

// Waits for the device's queued work (timing); nothing on the CPU.
void synchronize(const at::Device& device);

// A host tensor on `device`: copied from page-locked memory without waiting when that is an
// accelerator (the copy overlaps the work already queued), returned as it is for the CPU.
at::Tensor to_device(const at::Tensor& host, const at::Device& device);

}  // namespace ctune::ops
