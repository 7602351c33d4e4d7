// The process's resident memory, read from the kernel: below the tensor pool (which holds
// memory.limit against it) and ops/memory.h (which reports it).
#pragma once

#include <cstdint>
#include <string>

namespace ctune::ops {

// Resident memory of this process now, and its high-water mark since the last reset (bytes,
// from /proc/self/status), and the reset (Linux clear_refs), so a run's measured peak covers
// training, not loading.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();
void reset_peak_resident();

// The most this process can hold resident, and what sets it: the smallest of the machine's
// memory, its cgroup's memory.max (a container, a Slurm job's allocation; v2, every level up
// to the root, or v1's memory.limit_in_bytes) and its address-space limit (ulimit -v, which
// bounds resident memory too, as a page must be mapped to be resident). Past the first two the
// kernel's OOM killer ends the process; past the third an allocation fails.
struct HostCapacity {
  std::int64_t bytes = 0;
  std::string source;  // "the machine's memory", "its cgroup's memory.max", "its address-space limit (ulimit -v)"
};
HostCapacity host_capacity();

}  // namespace ctune::ops
