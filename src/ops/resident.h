// The process's resident memory, read from the kernel: below the tensor pool (which holds
// memory.limit against it) and ops/memory.h (which reports it).
#pragma once

#include <cstdint>
#include <optional>
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
// `sharing`: processes on this machine that share its memory and cgroup alike (the ranks of a
// node), of which this one may hold its share; ulimit -v is each process's own.
HostCapacity host_capacity(int sharing = 1);

// The parts of host_capacity, each bound in its own kind: what is resident is bounded by the
// machine's memory and the cgroup's limit (past them the OOM killer ends the process), what is
// mapped by ulimit -v (past it an allocation fails; none: nullopt). ops/memory.h checks a need
// against both.
HostCapacity resident_capacity();
std::optional<std::int64_t> address_space_limit();
inline constexpr const char* kAddressSpaceLimit = "its address-space limit (ulimit -v)";
// This process's anonymous resident memory (RssAnon: not pages of mapped files, which the kernel
// can drop and read again) and its mapped address space (VmSize).
std::int64_t anonymous_resident_bytes();
std::int64_t mapped_bytes();

}  // namespace ctune::ops
