// TensorBoard event files (logging.tensorboard): output_dir/tb/events.out.tfevents.<time>.<host>,
// one per session of a run, holding the scalars of metrics.jsonl (train/loss, train/lr,
// train/grad_norm, train/tokens_per_s, train/peak_mem_bytes, eval/loss, eval/ppl) with the same
// steps and wall times. The format (docs/formats.md "TensorBoard event files"): TFRecord framing
// (length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) around
// tensorflow.Event protocol buffers, encoded here by hand (no protobuf library).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ctune::train {

// CRC-32C (Castagnoli) and the "masked" form TFRecord stores: ((c >> 15) | (c << 17)) + 0xa282ead8.
std::uint32_t crc32c(const void* data, std::size_t n);
std::uint32_t masked_crc32c(const void* data, std::size_t n);

class EventWriter {
 public:
  // Creates dir (output_dir/tb) and a new event file in it, starting with the file_version
  // record ("brain.Event:2").
  explicit EventWriter(const std::filesystem::path& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event at `step` and `wall_time` (Unix seconds) with a simple_value per (tag, value);
  // written and flushed at once. IoError when the write fails.
  void scalars(std::int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);

  const std::filesystem::path& path() const { return path_; }

 private:
  void record(const std::string& bytes);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Rewrites every event file in dir (atomically) keeping the records of steps <= step (and the
// file_version record), and drops a torn last record: what a run resumed from the checkpoint at
// `step` continues from, so no step appears twice.
void truncate_events(const std::filesystem::path& dir, std::int64_t step);

}  // namespace ctune::train
