#include "ops/resident.h"

#include <sys/resource.h>

#include <fstream>
#include <optional>
#include <string>

namespace ctune::ops {

namespace {
// A "Field:   N kB" line of /proc/self/status in bytes; nullopt where there is none.
std::optional<std::int64_t> proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  }
  return std::nullopt;
}
}  // namespace

std::int64_t resident_bytes() { return proc_status_bytes("VmRSS:").value_or(0); }

std::int64_t peak_resident_bytes() {
  // VmHWM rather than getrusage's ru_maxrss: the former can be reset (reset_peak_resident), so a
  // run reports the peak of training rather than of loading.
  if (auto hwm = proc_status_bytes("VmHWM:")) return *hwm;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void reset_peak_resident() {
  // "5" resets the peak resident set size (VmHWM) to the current RSS (Linux >= 4.0).
  std::ofstream("/proc/self/clear_refs") << "5";
}

}  // namespace ctune::ops
