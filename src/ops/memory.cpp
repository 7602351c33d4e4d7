#include "ops/memory.h"

#include "ops/device.h"
#include "ops/tensor_pool.h"

namespace ctune::ops {

std::int64_t memory_now(const at::Device& device) {
  return device.is_cpu() ? resident_bytes() : ops::device_allocated_bytes(device);
}

std::int64_t peak_memory(const at::Device& device) {
  return device.is_cpu() ? peak_resident_bytes() : ops::device_peak_bytes(device);
}

void reset_peak_memory(const at::Device& device) {
  if (device.is_cpu()) {
    reset_peak_resident();
  } else {
    ops::reset_device_peak(device);
  }
}

void set_memory_limit(const at::Device& device, std::int64_t bytes) {
  if (device.is_cpu()) {
    set_pool_limit(bytes);
  } else {
    set_device_memory_limit(device, bytes);
  }
}

}  // namespace ctune::ops
