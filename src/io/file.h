// Files as ctune needs them: read-only memory maps that tensors can borrow (zero-copy loads),
// and crash-safe writes (temporary name, fsync, rename) so no reader ever sees half a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace ctune::io {

// A whole file mapped copy-on-write: readers see the file's bytes, writes through the mapping
// (e.g. an optimizer updating a borrowed weight) stay private to the process.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::uint8_t* mutable_data() { return data_; }
  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

std::string read_text_file(const std::filesystem::path& path);

// Writes a file under a temporary name in the same directory; commit() fsyncs and renames it
// into place. Destroyed without commit(), it removes the temporary file.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();

 private:
  std::filesystem::path target_, temp_;
  int fd_ = -1;
};

void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// Files appended to or created in place (metrics.jsonl, TensorBoard event files), opened never
// through a symbolic link: IoError for a link, or when the file cannot be opened. create_exclusive
// also fails when anything is already there.
std::FILE* open_for_append(const std::filesystem::path& path);
std::FILE* create_exclusive(const std::filesystem::path& path);

// "<pid>-<16 random hex digits>": the suffix of every staging name, fresh and unguessable, so
// no other user can plant a link where a write is about to stage (remove_stale_siblings reads
// the pid back).
std::string unique_tag();

// Flushes a directory entry (after renames into it) so the rename survives a crash.
void fsync_directory(const std::filesystem::path& dir);

// A directory built under "<target>.partial-<unique_tag()>" and renamed to <target> by commit(),
// so a checkpoint directory either exists complete or not at all. Without commit() it is removed.
// The staging directory is created exclusively: never one that was already there.
class StagingDir {
 public:
  // Throws ConfigError when target exists and is not empty (unless overwrite is set). The
  // staging directory is target.partial-<tag>; the tag defaults to unique_tag(). Several
  // processes writing one directory (a sharded checkpoint) agree on a tag instead: one that
  // starts with the creator's pid and is as unguessable (IoError when it exists already).
  StagingDir(std::filesystem::path target, bool overwrite, const std::string& tag = {});
  static std::filesystem::path staging_path(const std::filesystem::path& target, const std::string& tag);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  void commit();

 private:
  std::filesystem::path target_, staging_;
  bool overwrite_ = false;
  bool committed_ = false;
};

// Removes what killed writes of `target` left beside it: "<target>.partial-<tag>" (StagingDir),
// "<target>.old-<tag>" and "<target>.unchecked-<tag>" (export), whose tag starts with the pid of
// a process no longer running (io::unique_tag).
void remove_stale_siblings(const std::filesystem::path& target);

}  // namespace ctune::io
