// Guards for the directories and files commands write: never "/" or the home directory, never a
// directory that holds the command's own inputs, never a non-empty directory that is not a ctune
// run; one writer per run directory at a time; and leftovers of killed writes removed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "io/run_layout.h"

namespace ctune::io {

// A named input of a command ("model.path", "--base", ...) and its path.
using NamedPaths = std::vector<std::pair<std::string, std::filesystem::path>>;

// Whether `dir` is `path` or one of its ancestors, after resolving ".", ".." and symbolic links.
bool holds(const std::filesystem::path& dir, const std::filesystem::path& path);

// Throws ConfigError naming `what` (e.g. "output_dir") when `out` is "/", the home directory, a
// symbolic link to nothing (creating the directory would fail with a bare "File exists"), or a
// directory that holds one of `inputs` (writing or replacing there could destroy them).
void refuse_unsafe_output(const std::filesystem::path& out, const std::string& what, const NamedPaths& inputs);

// The same for a file a command writes (`what`: "--write"): a regular file or nothing. Refused:
// anything else (a directory, FIFO, socket, device or link to nothing: the write's rename would
// replace the node itself, /dev/null as any file), one of `inputs` or a file inside one (even
// with `overwrite`), and an existing file without `overwrite`. Checked before anything is
// computed; the write itself stages and renames (io::write_file_atomic).
void refuse_unsafe_output_file(const std::filesystem::path& out, const std::string& what, const NamedPaths& inputs, bool overwrite);

// The file that marks a directory as a ctune run (io::kRunMarker, written when the run starts),
// and the test for it: the marker, or an older run's recipe.yaml beside its metrics.jsonl or
// checkpoints/.
bool is_run_dir(const std::filesystem::path& dir);

// A session that resumed the run: from which checkpoint, at which step, when (unix seconds).
// The marker keeps them in order, so the report reads resumes as records, not from the log.
struct ResumeRecord {
  std::int64_t step = 0;
  std::string from;
  double time = 0;
};
// Writes the marker with `resumes` (atomically).
void mark_run_dir(const std::filesystem::path& dir, const std::vector<ResumeRecord>& resumes = {});
// The marker's resume records: none for a run never resumed, an older marker or an unreadable one.
std::vector<ResumeRecord> read_resume_records(const std::filesystem::path& dir);

// An exclusive lock on a directory for the life of the object: flock() on <dir>/.ctune.lock,
// which holds the owner's pid. The kernel releases it when the process ends, however it ends,
// so the lock of a killed run is simply free again. A second writer gets ConfigError naming the
// holder's pid.
class DirLock {
 public:
  DirLock(const std::filesystem::path& dir, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// Whether a process (this one included, through another DirLock) holds `dir`'s lock now.
bool is_locked(const std::filesystem::path& dir);

}  // namespace ctune::io
