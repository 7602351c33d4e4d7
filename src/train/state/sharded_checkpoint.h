// Sharded checkpoints (checkpoint.layout: sharded; the default when the optimizer state is
// sharded over several ranks): each rank writes what it holds of the trainable weights and of
// the optimizer state into checkpoint/shards/rank-RRRRR-of-NNNNN.safetensors, as slices of the
// tensors one process would write: element ranges of each flattened tensor, under one
// process's names. Nothing in a shard file depends on how the ranks cut their flat buffers, so
// any world size, any strategy and one process read them back (resharding), and
// `ctune consolidate` assembles them into the method's whole layout (a Hugging Face model or a
// PEFT adapter). No rank ever holds the whole model or state to write one. The directory is
// staged and committed as any checkpoint (train/state/checkpoint.h): rank 0's manifest, written after
// every rank's shard, lists the shard files. See docs/distributed.md, "Sharded checkpoints".
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/decoder.h"

namespace ctune::train {

// Elements [offset, offset + data.numel()) of the flattened tensor `name` of shape `shape`.
struct TensorSlice {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;
  at::Tensor data;  // 1-D, contiguous
};

// What one rank writes.
struct StateShard {
  std::vector<TensorSlice> weights;    // trainable parameters, by the model's parameter names
  std::vector<TensorSlice> optimizer;  // Optimizer::state() entries, by their names
};

inline constexpr const char* kShardsDir = io::kStateShardsDir;

// "rank-00001-of-00004.safetensors"
std::string state_shard_file_name(int index, int count);
// The reverse: {1, 4} for that name; nullopt for any other.
std::optional<std::pair<int, int>> parse_state_shard_file_name(const std::string& name);

// Writes `shard` as shard `index` of `count` into checkpoint/shards/ (atomically).
void write_state_shard(const std::filesystem::path& checkpoint, int index, int count, const StateShard& shard);

// Whether `dir` holds a sharded checkpoint (a shards/ directory).
bool is_sharded_checkpoint(const std::filesystem::path& dir);

// Every shard file of a checkpoint, read back. Throws FormatError naming the file when one is
// missing, foreign or inconsistent, and when a tensor's slices do not cover it exactly once.
class ShardedState {
 public:
  explicit ShardedState(const std::filesystem::path& checkpoint);

  int shard_count() const { return static_cast<int>(files_.size()); }
  // Whole tensors assembled from every shard's slices, in the order rank 0 lists them.
  std::vector<std::pair<std::string, at::Tensor>> weights() const { return assemble(weights_); }
  std::vector<std::pair<std::string, at::Tensor>> optimizer() const { return assemble(optimizer_); }
  // Copies the weights into `model`'s parameters of the same names, slice by slice (no whole
  // copy); every trainable parameter must be there, with its shape. Returns how many it filled.
  std::size_t load_weights_into(model::CausalLM& model) const;

 private:
  struct Part {
    const io::SafetensorsFile* file = nullptr;
    const io::TensorInfo* info = nullptr;
    std::int64_t offset = 0;
  };
  struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<Part> parts;
  };
  std::vector<std::pair<std::string, at::Tensor>> assemble(const std::vector<Entry>& entries) const;
  void check_coverage(const std::vector<Entry>& entries) const;

  std::filesystem::path dir_;
  std::vector<std::shared_ptr<io::SafetensorsFile>> files_;
  std::vector<Entry> weights_, optimizer_;
};

}  // namespace ctune::train
