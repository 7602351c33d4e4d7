#include "io/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/progress.h"
#include "core/random_hex.h"
#include "core/regular_file.h"

namespace ctune::io {
namespace fs = std::filesystem;

namespace {
std::string errno_text(int err) {
  if (err == ENOSPC) return "no space left on device";
  return std::strerror(err);
}

// How many fresh names a staging write tries before it gives up: each is new and unguessable,
// so only something planted in a race with every try could make them all collide.
constexpr int kNameTries = 16;
}  // namespace

namespace {
bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::FILE* open_file(const fs::path& path, int flags, const char* mode, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) throw IoError(path.string() + ": is a symbolic link; refusing to write through it");
  if (fd < 0) throw IoError(path.string() + ": cannot " + what + " (" + errno_text(errno) + ")");
  std::FILE* f = ::fdopen(fd, mode);
  if (f == nullptr) {
    ::close(fd);
    throw IoError(path.string() + ": cannot " + what);
  }
  return f;
}
}  // namespace

std::FILE* open_for_append(const fs::path& path) { return open_file(path, O_WRONLY | O_CREAT | O_APPEND, "a", "open for appending"); }
std::FILE* create_exclusive(const fs::path& path) { return open_file(path, O_WRONLY | O_CREAT | O_EXCL, "wb", "create"); }

std::string unique_tag() { return std::to_string(::getpid()) + "-" + random_hex(8); }

std::shared_ptr<MappedFile> MappedFile::open(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path.string() + ": cannot open (" + errno_text(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError(path.string() + ": cannot stat (" + errno_text(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path.string() + ": not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<std::uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      // Out of address space is a memory shortfall, not a bad file (docs/planning.md, "Running
      // out of memory").
      struct rlimit as {};
      if (err == ENOMEM && ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        throw MemoryError(path.string() + ": mapping its " + format_bytes(static_cast<std::int64_t>(file->size_)) +
                          " needs address space past the process's limit (ulimit -v " +
                          format_bytes(static_cast<std::int64_t>(as.rlim_cur)) + ")");
      }
      throw IoError(path.string() + ": mmap failed (" + errno_text(err) + ")");
    }
    file->data_ = static_cast<std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid after close
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

std::string read_text_file(const fs::path& path) {
  require_regular_file(path, "a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The temporary file is created exclusively under a fresh, unguessable name: whatever another
// user planted beside the target (a symbolic link above all) is never opened or written.
AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  for (int attempt = 0; attempt < kNameTries && fd_ < 0; ++attempt) {
    temp_ = target_;
    temp_ += ".tmp-" + unique_tag();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) throw IoError(temp_.string() + ": cannot create (" + errno_text(errno) + ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError(target_.string() + ": write failed (" + errno_text(errno) + ")");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) throw IoError(target_.string() + ": fsync failed (" + errno_text(errno) + ")");
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_.c_str());
    throw IoError(target_.string() + ": close failed (" + errno_text(errno) + ")");
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_.c_str());
    throw IoError(target_.string() + ": rename failed (" + errno_text(err) + ")");
  }
  fsync_directory(target_.parent_path().empty() ? fs::path(".") : target_.parent_path());
}

void write_file_atomic(const fs::path& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents);
  f.commit();
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems refuse to open directories
  ::fsync(fd);
  ::close(fd);
}

fs::path StagingDir::staging_path(const fs::path& target, const std::string& tag) {
  fs::path p = target;
  p += ".partial-" + tag;
  return p;
}

StagingDir::StagingDir(fs::path target, bool overwrite, const std::string& tag) : target_(std::move(target)), overwrite_(overwrite) {
  remove_stale_siblings(target_);  // staging directories of killed writes
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    if (!fs::is_directory(target_, ec)) throw ConfigError(target_.string() + ": exists and is not a directory");
    if (!overwrite_ && !fs::is_empty(target_, ec)) {
      throw ConfigError(target_.string() + ": directory exists and is not empty (pass --overwrite to replace it)");
    }
  }
  const fs::path parent = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  fs::create_directories(parent, ec);
  // Created exclusively (mkdir never follows a link, nor reuses what is there): a directory this
  // process made, not one another user planted or linked to under a name they guessed.
  int err = 0;
  for (int attempt = 0; attempt < kNameTries; ++attempt) {
    staging_ = staging_path(target_, tag.empty() ? unique_tag() : tag);
    if (::mkdir(staging_.c_str(), 0755) == 0) return;
    err = errno;
    if (err != EEXIST || !tag.empty()) break;
  }
  throw IoError(staging_.string() + ": cannot create the staging directory (" +
                (err == EEXIST ? std::string("something is already there") : errno_text(err)) + ")");
}

StagingDir::~StagingDir() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagingDir::commit() {
  for (const auto& entry : fs::directory_iterator(staging_)) {
    if (entry.is_regular_file()) {
      int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
  }
  fsync_directory(staging_);
  std::error_code ec;
  fs::path old;
  if (fs::exists(target_, ec)) {
    // Move the old directory aside first so the target is never a mix of both.
    old = target_;
    old += ".old-" + unique_tag();
    fs::rename(target_, old, ec);
    if (ec) throw IoError(target_.string() + ": cannot move existing directory aside (" + ec.message() + ")");
  }
  fs::rename(staging_, target_, ec);
  if (ec) throw IoError(target_.string() + ": cannot rename staging directory into place (" + ec.message() + ")");
  committed_ = true;
  fsync_directory(target_.parent_path().empty() ? fs::path(".") : target_.parent_path());
  if (!old.empty()) fs::remove_all(old, ec);
}

void remove_stale_siblings(const fs::path& target) {
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string base = target.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* tag : {".partial-", ".old-", ".unchecked-"}) {
      const std::string prefix = base + tag;
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      char* end = nullptr;
      const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
      if (end == nullptr || (*end != '\0' && *end != '-') || process_alive(pid)) continue;
      std::error_code rm;
      fs::remove_all(entry.path(), rm);
    }
  }
}

}  // namespace ctune::io
