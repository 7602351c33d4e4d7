#include "io/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/json.h"
#include "io/file.h"

namespace ctune::io {
namespace fs = std::filesystem;

namespace {

// Absolute, links resolved as far as the path exists, "." and ".." folded, and no trailing
// separator: "$HOME/y/.." (y not yet there) is "$HOME", not "$HOME/".
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  r = (ec ? fs::absolute(p) : r).lexically_normal();
  while (r.has_relative_path() && r.filename().empty()) r = r.parent_path();
  return r;
}

// What stands at `path` when it is neither a regular file nor a directory nor nothing, in
// words ("a FIFO", "a symbolic link to /gone, which does not exist"); "" otherwise.
std::string odd_node(const fs::path& path) {
  std::error_code ec;
  const auto link = fs::symlink_status(path, ec);
  const auto target = fs::status(path, ec);
  if (fs::is_symlink(link) && !fs::exists(target)) {
    return "a symbolic link to " + fs::read_symlink(path, ec).string() + ", which does not exist";
  }
  switch (target.type()) {
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    default: return "";
  }
}

}  // namespace

bool holds(const fs::path& dir, const fs::path& path) {
  const fs::path d = resolved(dir), p = resolved(path);
  auto di = d.begin(), pi = p.begin();
  for (; di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing separator
    if (pi == p.end() || *di != *pi) return false;
  }
  return true;
}

void refuse_unsafe_output(const fs::path& out, const std::string& what, const NamedPaths& inputs) {
  if (const std::string odd = odd_node(out); !odd.empty())
    throw ConfigError(what + " " + out.string() + ": is " + odd + " (expected a directory or nothing)");
  const fs::path r = resolved(out);
  if (r == r.root_path()) throw ConfigError(what + " " + out.string() + ": refusing to write into the root directory");
  if (const char* home = std::getenv("HOME"); home && *home && r == resolved(home)) {
    throw ConfigError(what + " " + out.string() + ": refusing to write into the home directory (name a directory for the results)");
  }
  for (const auto& [name, path] : inputs) {
    if (!path.empty() && holds(out, path)) {
      throw ConfigError(what + " " + out.string() + ": holds this command's input " + name + " (" + path.string() +
                        "); writing or replacing results there could destroy it (choose another directory)");
    }
  }
}

void refuse_unsafe_output_file(const fs::path& out, const std::string& what, const NamedPaths& inputs, bool overwrite) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) throw ConfigError(what + " " + out.string() + ": is a directory (expected a regular file or nothing)");
  if (const std::string odd = odd_node(out); !odd.empty())
    throw ConfigError(what + " " + out.string() + ": is " + odd + " (expected a regular file or nothing)");
  for (const auto& [name, path] : inputs) {
    if (path.empty()) continue;
    // The input itself (any name of it: a link, a hard link), or a file inside an input directory.
    const bool same = resolved(path) == resolved(out) || fs::equivalent(path, out, ec);
    if (same || holds(path, out)) {
      throw ConfigError(what + " " + out.string() + ": is " + (same ? "" : "inside ") + "this command's input " + name + " (" +
                        path.string() + "); writing there could destroy it (choose another file)");
    }
  }
  if (fs::exists(out, ec) && !overwrite) throw ConfigError(what + " " + out.string() + ": exists (pass --overwrite to replace it)");
}

bool is_run_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kRunMarker, ec)) return true;
  return fs::exists(dir / kRecipeFile, ec) && (fs::exists(dir / kMetricsFile, ec) || fs::exists(dir / kCheckpointsDir, ec));
}

void mark_run_dir(const fs::path& dir, const std::vector<ResumeRecord>& resumes) {
  Json marker = {{"format", "ctune-run-1"}};
  if (!resumes.empty()) {
    marker["resumes"] = Json::array();
    for (const auto& r : resumes) marker["resumes"].push_back({{"step", r.step}, {"from", r.from}, {"time", r.time}});
  }
  write_file_atomic(dir / kRunMarker, marker.dump() + "\n");
}

std::vector<ResumeRecord> read_resume_records(const fs::path& dir) {
  std::vector<ResumeRecord> out;
  try {
    const Json marker = read_json_file(dir / kRunMarker, 16 << 20);
    if (!marker.is_object() || !marker.contains("resumes") || !marker["resumes"].is_array()) return out;
    for (const auto& r : marker["resumes"]) {
      if (!r.is_object() || !r.contains("step") || !r["step"].is_number_integer()) continue;
      out.push_back({r["step"].get<std::int64_t>(), r.value("from", std::string()), r.value("time", 0.0)});
    }
  } catch (const std::exception&) {
    // No marker, or not one this reads: no records.
  }
  return out;
}

bool is_locked(const fs::path& dir) {
  const int fd = ::open((dir / kLockFile).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  if (!held) ::flock(fd, LOCK_UN);
  ::close(fd);
  return held;
}

DirLock::DirLock(const fs::path& dir, const std::string& what) {
  const fs::path path = dir / kLockFile;
  // Never through a link: a lock file that is a symbolic link (or a second name of another
  // file) would have its target truncated and overwritten with this pid.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0 && errno == ELOOP) throw IoError(path.string() + ": is a symbolic link; refusing to use it as the lock file (remove it)");
  if (fd_ < 0) throw IoError(path.string() + ": cannot open lock file (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd_);
    fd_ = -1;
    throw IoError(path.string() + ": is not a plain file of its own (a link to another file?); refusing to use it as the lock file (remove it)");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const auto n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      const long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
      throw ConfigError(what + " " + dir.string() + " is in use by another ctune process" +
                        (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
                        "; wait for it to finish or choose another directory");
    }
    throw IoError(path.string() + ": cannot lock (" + std::strerror(err) + ")");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds regardless; only the pid in messages to other writers is missing.
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}


}  // namespace ctune::io
