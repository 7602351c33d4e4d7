// What a training run writes to output_dir's filesystem at most, predicted before it starts:
// its checkpoints, as many on disk at once as the cadence and checkpoint.keep_last make (a new
// one is written whole before retention removes the oldest), and its result after the last.
// A run whose writes cannot fit the space free now would fail at a checkpoint, hours in, having
// lost every step since the one before; it is refused before it starts instead
// (docs/planning.md, "Running out of disk").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ctune::train {

// The bytes of what a run writes (the tensors' bytes and the files beside them; the state's
// small files, kilobytes, are not counted).
struct RunWrites {
  std::int64_t checkpoint = 0;  // one checkpoint: the trainable weights and the optimizer state
  std::int64_t result = 0;      // output_dir/model or output_dir/adapter
};

// When checkpoints are written (train/run/checkpoint_cadence.h) and how many are kept
// (CheckpointManager::apply_retention).
struct CheckpointSchedule {
  std::int64_t first_step = 0;  // the step the run starts after (a resumed checkpoint's)
  std::int64_t max_steps = 0;
  std::int64_t every_n_steps = 0;  // 0: only at the end
  std::int64_t keep_last = 1;
  std::int64_t existing = 0;  // complete checkpoints in output_dir now (retention counts them)
  bool protects_one = false;  // resumed from one of them: it is kept beyond keep_last
};

struct DiskNeed {
  std::int64_t bytes = 0;    // the most the run adds to what output_dir holds now (0 when it frees more)
  std::int64_t at_once = 0;  // checkpoints on disk at that moment
  std::string moment;        // "writing step 1500's checkpoint", "writing the result"
};

DiskNeed disk_need(const RunWrites& writes, const CheckpointSchedule& schedule);
// "a checkpoint 34.2 MB, the result 11.4 MB: at most 114 MB more on disk (3 checkpoints at
// once)": what `train` logs and `estimate` prints.
std::string describe(const RunWrites& writes, const DiskNeed& need);

// Bytes free to this process on the filesystem `path` is (or would be) on: its nearest existing
// ancestor's (-1: unknown).
std::int64_t free_bytes_at(const std::filesystem::path& path);

// Bytes of the regular files under `path` (0 when there is none): what an overwritten run's
// outputs give back.
std::int64_t bytes_under(const std::filesystem::path& path);

// Throws IoError naming output_dir, what the run writes (one checkpoint, how many at once, the
// result) against what is free, and the checkpoint.keep_last that fits when a smaller one
// does, when `need` is more than `free` (free < 0: unknown, nothing is refused). Returns the need.
DiskNeed refuse_what_cannot_be_written(const std::filesystem::path& output_dir, const RunWrites& writes,
                                   const CheckpointSchedule& schedule, std::int64_t free);

}  // namespace ctune::train
