#include "train/forecast/disk_need.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"
#include "core/progress.h"

namespace ctune::train {
namespace fs = std::filesystem;

DiskNeed disk_need(const RunWrites& writes, const CheckpointSchedule& s) {
  // Retention (CheckpointManager::apply_retention) runs once before the first step and after
  // every write: it keeps the newest keep_last, and the checkpoint resumed from (the newest
  // then) besides once keep_last newer ones have pushed it out of them.
  const std::int64_t keep = std::max<std::int64_t>(1, s.keep_last);
  const std::int64_t start = std::min(s.existing, keep);
  const auto after = [&](std::int64_t j) {  // checkpoints on disk after the j-th write
    return std::min(start + j, keep) + (s.protects_one && j >= keep ? 1 : 0);
  };
  // The writes: every cadence step after first_step, and the last step's when it is not one
  // (train/run/checkpoint_cadence.h); the j-th is at step_of(j).
  const std::int64_t every = s.every_n_steps;
  std::int64_t count = 0;
  if (s.first_step < s.max_steps) count = every > 0 ? s.max_steps / every - s.first_step / every + (s.max_steps % every != 0 ? 1 : 0) : 1;
  const auto step_of = [&](std::int64_t j) { return every > 0 ? std::min(s.max_steps, (s.first_step / every + j) * every) : s.max_steps; };
  DiskNeed worst{0, start, ""};
  const auto consider = [&](std::int64_t checkpoints, std::int64_t extra, const std::string& moment) {
    const std::int64_t added = (checkpoints - s.existing) * writes.checkpoint + extra;
    if (added > worst.bytes || worst.moment.empty()) worst = {added, checkpoints, moment};
  };
  // Each write is whole before retention removes the oldest: during the j-th, after(j - 1) + 1
  // are on disk, which grows with j until retention holds it steady. The moment named is the
  // first write at the most; after() only changes at the candidates below.
  if (count > 0) {
    for (const std::int64_t j : {std::int64_t{1}, keep - start + 1, keep + 1, count}) {
      if (j < 1 || j > count || after(j - 1) != after(count - 1)) continue;
      consider(after(j - 1) + 1, 0, "writing step " + std::to_string(step_of(j)) + "'s checkpoint");
      break;
    }
  }
  consider(after(count), writes.result, "writing the result");
  worst.bytes = std::max<std::int64_t>(0, worst.bytes);
  return worst;
}

std::string describe(const RunWrites& writes, const DiskNeed& need) {
  return "a checkpoint " + format_bytes(writes.checkpoint) + ", the result " + format_bytes(writes.result) + ": at most " +
         format_bytes(need.bytes) + " more on disk (" + std::to_string(need.at_once) + " checkpoint" + (need.at_once == 1 ? "" : "s") +
         " at once)";
}

std::int64_t free_bytes_at(const fs::path& path) {
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  while (!at.empty() && !fs::exists(at, ec)) {
    if (at == at.parent_path()) break;
    at = at.parent_path();
  }
  const fs::space_info space = fs::space(at, ec);
  if (ec) return -1;
  return static_cast<std::int64_t>(space.available);
}

std::int64_t bytes_under(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(path, ec))) return static_cast<std::int64_t>(fs::file_size(path, ec));
  std::int64_t bytes = 0;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) bytes += static_cast<std::int64_t>(it->file_size(ec));
  }
  return bytes;
}

DiskNeed refuse_what_cannot_be_written(const fs::path& output_dir, const RunWrites& writes, const CheckpointSchedule& schedule,
                                   std::int64_t free) {
  const DiskNeed need = disk_need(writes, schedule);
  if (free < 0 || need.bytes <= free) return need;
  std::string line = output_dir.string() + ": this run writes up to " + format_bytes(need.bytes) + " more (" +
                     std::to_string(need.at_once) + " checkpoint" + (need.at_once == 1 ? "" : "s") + " of " +
                     format_bytes(writes.checkpoint) + " on disk at once when " + need.moment + ", with checkpoint.keep_last " +
                     std::to_string(schedule.keep_last) + "; the result " + format_bytes(writes.result) + "), past the " +
                     format_bytes(free) + " free on its filesystem";
  // The most checkpoints kept that fit, when fewer than asked do (the need grows with keep_last).
  const auto need_with = [&](std::int64_t k) {
    CheckpointSchedule fewer = schedule;
    fewer.keep_last = k;
    return disk_need(writes, fewer).bytes;
  };
  std::int64_t fits = 0;
  for (std::int64_t low = 1, high = schedule.keep_last - 1; low <= high;) {
    const std::int64_t k = low + (high - low) / 2;
    if (need_with(k) <= free) {
      fits = k;
      low = k + 1;
    } else {
      high = k - 1;
    }
  }
  CheckpointSchedule at_the_end = schedule;
  at_the_end.every_n_steps = 0;
  at_the_end.keep_last = 1;
  if (fits > 0) {
    line += "; checkpoint.keep_last=" + std::to_string(fits) + " fits";
  } else if (schedule.every_n_steps > 0 && disk_need(writes, at_the_end).bytes <= free) {
    line += "; checkpoint.every_n_steps=0 (one checkpoint, at the end) fits";
  } else {
    line += "; free space, or write elsewhere (output_dir)";
  }
  throw IoError(line);
}

}  // namespace ctune::train
