#include "ops/device.h"

#include "core/error.h"

#if CTUNE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#endif

namespace ctune::ops {

bool built_with_cuda() {
#if CTUNE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

at::Device parse_device(const std::string& name) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) != 0) throw ConfigError("expected cpu or cuda, found '" + name + "'");
  if (!built_with_cuda()) {
    throw ConfigError(name + " needs a CUDA build of LibTorch; this build is CPU-only (use device: cpu, or build as docs/gpu.md says)");
  }
  at::Device device(at::kCUDA);
  try {
    device = at::Device(name);
  } catch (const std::exception&) {
    throw ConfigError("'" + name + "' is not a device name (cuda or cuda:N)");
  }
#if CTUNE_WITH_CUDA
  const int visible = static_cast<int>(c10::cuda::device_count());
  const int index = device.has_index() ? device.index() : 0;
  if (index >= visible) {
    throw ConfigError(name + " asked for, but " + std::to_string(visible) + " CUDA device(s) are visible");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
#else
  return device;
#endif
}

std::int64_t device_peak_bytes(const at::Device& device) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) {
    // Index 0 of every stat array is the aggregate over pool kinds (StatType::AGGREGATE).
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
  }
#endif
  return 0;
}

std::int64_t device_allocated_bytes(const at::Device& device) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
#endif
  return 0;
}

void reset_device_peak(const at::Device& device) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

std::int64_t device_total_bytes(const at::Device& device) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return static_cast<std::int64_t>(total_bytes);
  }
#else
  (void)device;
#endif
  return 0;
}

void set_device_memory_limit(const at::Device& device, std::int64_t bytes) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) {
    const std::int64_t total = device_total_bytes(device);
    if (total <= 0) return;
    const double fraction = bytes > 0 ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total)) : 1.0;
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
  }
#else
  (void)device;
  (void)bytes;
#endif
}

void synchronize(const at::Device& device) {
#if CTUNE_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

at::Tensor to_device(const at::Tensor& host, const at::Device& device) {
  if (host.device() == device) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace ctune::ops
