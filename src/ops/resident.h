// The process's resident memory, read from the kernel: below the tensor pool (which holds
// memory.limit against it) and ops/memory.h (which reports it).
#pragma once

#include <cstdint>

namespace ctune::ops {

// Resident memory of this process now, and its high-water mark since the last reset (bytes,
// from /proc/self/status), and the reset (Linux clear_refs), so a run's measured peak covers
// training, not loading.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();
void reset_peak_resident();

}  // namespace ctune::ops
