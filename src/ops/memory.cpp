#include "ops/memory.h"

#include <algorithm>

#include "core/error.h"
#include "core/progress.h"

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

namespace {
// "loading X needs 2.0 GB of new memory (...), past the 1.5 GB left of the 2.1 GB of the
// machine's memory (0.6 GB held already)".
std::string shortfall(const std::string& what, std::int64_t need, const char* kind, const std::string& detail, std::int64_t bound,
                      std::int64_t held, const std::string& source) {
  return what + " needs " + format_bytes(need) + " " + kind + " (" + detail + "), past the " + format_bytes(bound - held) + " left of the " + format_bytes(bound) +
         " of " + source + " (" + format_bytes(held) + " held already)";
}
}  // namespace

std::string host_memory_shortfall(const std::string& what, const HostNeed& need, const std::string& detail) {
  const std::int64_t reusable = tensor_pool_stats().free_bytes;
  const HostCapacity resident = resident_capacity();
  const std::int64_t anonymous = anonymous_resident_bytes() - reusable;
  if (need.resident > 0 && anonymous + need.resident > resident.bytes)
    return shortfall(what, need.resident, "of new memory", detail, resident.bytes, anonymous, resident.source);
  const auto as = address_space_limit();
  const std::int64_t mapped = mapped_bytes() - reusable;
  if (need.address > 0 && as && mapped + need.address > *as)
    return shortfall(what, need.address, "of address space", detail, *as, mapped, kAddressSpaceLimit);
  return "";
}

void require_host_memory(const std::string& what, const HostNeed& need, const std::string& detail) {
  if (auto line = host_memory_shortfall(what, need, detail); !line.empty()) throw MemoryError(line);
}

}  // namespace ctune::ops
