#include "ops/resident.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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

namespace {
// A cgroup limit file's bytes: nullopt for "max", an unreadable file, or v1's "no limit"
// (a value near 2^63).
std::optional<std::int64_t> cgroup_limit(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    const long long v = std::stoll(text);
    if (v <= 0 || v >= (std::int64_t{1} << 62)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The smallest memory limit of this process's cgroup and its ancestors: v2's memory.max
// ("0::/path" in /proc/self/cgroup; under /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid
// system) and v1's memory.limit_in_bytes ("N:memory:/path").
std::optional<std::int64_t> cgroup_capacity() {
  namespace fs = std::filesystem;
  std::optional<std::int64_t> least;
  auto walk = [&](const fs::path& root, const std::string& path, const char* file) {
    for (fs::path dir = root / path.substr(1);; dir = dir.parent_path()) {
      if (auto v = cgroup_limit(dir / file)) least = least ? std::min(*least, *v) : *v;
      if (dir == root || dir == dir.parent_path()) break;
    }
  };
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos || line.size() <= second + 1 || line[second + 1] != '/')
      continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.empty()) {
      walk("/sys/fs/cgroup", path, "memory.max");
      walk("/sys/fs/cgroup/unified", path, "memory.max");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      walk("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
    }
  }
  return least;
}
}  // namespace

HostCapacity resident_capacity() {
  HostCapacity c{static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE)),
                 "the machine's memory"};
  if (auto group = cgroup_capacity(); group && *group < c.bytes) c = {*group, "its cgroup's memory.max"};
  return c;
}

std::optional<std::int64_t> address_space_limit() {
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::int64_t>(as.rlim_cur);
}

HostCapacity host_capacity(int sharing) {
  HostCapacity c = resident_capacity();
  if (sharing > 1) {
    c = {c.bytes / sharing, "a rank's share (1 of the " + std::to_string(sharing) + " on this machine) of " + c.source};
  }
  if (auto as = address_space_limit(); as && *as < c.bytes) c = {*as, kAddressSpaceLimit};
  return c;
}

std::int64_t anonymous_resident_bytes() { return proc_status_bytes("RssAnon:").value_or(0); }
std::int64_t mapped_bytes() { return proc_status_bytes("VmSize:").value_or(0); }

}  // namespace ctune::ops
