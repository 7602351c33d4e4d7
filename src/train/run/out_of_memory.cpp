#include "train/run/out_of_memory.h"

#include "ops/device.h"
#include "ops/memory.h"
#include "ops/memory_phase.h"
#include "ops/resident.h"

namespace ctune::train {

namespace {

// What the device has: the GPU's memory (ops/device.h), or this rank's share of what the process
// can hold on the CPU (ops/resident.h): ranks on one machine share its memory and its cgroup (the
// ranks of `--nproc`, of torchrun and of srun on a node run in the job's one cgroup)
// (docs/planning.md, "Running out of memory").
ops::HostCapacity capacity_of(const at::Device& device, int ranks_here) {
  if (!device.is_cpu()) return {ops::device_total_bytes(device), "the device's memory"};
  return ops::host_capacity(ranks_here);
}

std::string describe(const OutOfMemoryFacts& f) {
  if (f.predicted_only) {  // after the kind, "out of memory: "
    return f.phase + ": the ledger predicts a peak of " + format_mb(f.predicted_peak) + " (largest line " + f.largest_line +
           " " + format_mb(f.largest_bytes) + "), past the " + format_mb(f.capacity) + " of " + f.capacity_source;
  }
  std::string s = f.phase + ": " + format_mb(f.in_use) + " in use";  // after the kind, "out of memory: "
  if (f.requested > 0) s += " and " + format_mb(f.requested) + " more asked for";
  s += f.limit > 0 ? ", past memory.limit " + format_mb(f.limit) : ", of the " + format_mb(f.capacity) + " of " + f.capacity_source;
  if (f.predicted_peak > 0) {
    s += "; the ledger predicted a peak of " + format_mb(f.predicted_peak) + " (largest line " + f.largest_line + " " + format_mb(f.largest_bytes) + ")";
  }
  return s;
}

}  // namespace

OutOfMemoryFacts out_of_memory_facts(const at::Device& device, std::int64_t limit, const Ledger* ledger, int ranks_here) {
  OutOfMemoryFacts f;
  f.phase = ops::memory_phase_text();
  f.limit = limit;
  const auto capacity = capacity_of(device, ranks_here);
  f.capacity = capacity.bytes;
  f.capacity_source = capacity.source;
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
    : MemoryError(describe(facts) + advice), facts_(std::move(facts)) {}

}  // namespace ctune::train
