#include "train/run/out_of_memory.h"

#include <unistd.h>

#include "ops/device.h"
#include "ops/memory.h"
#include "ops/memory_phase.h"

namespace ctune::train {

namespace {

// What the device has: the CPU's physical memory, or the GPU's (ops/device.h).
std::int64_t capacity_of(const at::Device& device) {
  if (!device.is_cpu()) return ops::device_total_bytes(device);
  return static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

std::string describe(const OutOfMemoryFacts& f) {
  std::string s = f.phase + ": " + format_mb(f.in_use) + " in use";  // after the kind, "out of memory: "
  if (f.requested > 0) s += " and " + format_mb(f.requested) + " more asked for";
  s += f.limit > 0 ? ", past memory.limit " + format_mb(f.limit) : ", of " + format_mb(f.capacity) + " the device has";
  if (f.predicted_peak > 0) {
    s += "; the ledger predicted a peak of " + format_mb(f.predicted_peak) + " (largest line " + f.largest_line + " " + format_mb(f.largest_bytes) + ")";
  }
  return s;
}

}  // namespace

OutOfMemoryFacts out_of_memory_facts(const at::Device& device, std::int64_t limit, const Ledger* ledger) {
  OutOfMemoryFacts f;
  f.phase = ops::memory_phase_text();
  f.limit = limit;
  f.capacity = capacity_of(device);
  f.in_use = ops::peak_memory(device);
  if (auto refused = ops::last_refused_allocation()) {
    f.requested = refused->requested;
    f.in_use = refused->in_use;
  }
  if (ledger) {
    f.predicted_peak = ledger->peak_bytes;
    for (const auto& line : ledger->lines) {
      // The runtime is what the process held before the model: no technique moves it.
      if (line.name == "runtime") {
        f.runtime = line.bytes;
        continue;
      }
      if (line.bytes > f.largest_bytes) {
        f.largest_bytes = line.bytes;
        f.largest_line = line.name;
      }
    }
  }
  return f;
}

OutOfMemory::OutOfMemory(OutOfMemoryFacts facts, const std::string& advice)
    : Error(describe(facts) + advice), facts_(std::move(facts)) {}

}  // namespace ctune::train
