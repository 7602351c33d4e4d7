// Hugging Face checkpoint directories (torch-free): a single model.safetensors or shards listed
// by model.safetensors.index.json, read through one name -> tensor lookup; and the shard plan
// and index for writing, with HF's shard names (model-00001-of-00003.safetensors).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace ctune::io {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

// Where one tensor of a checkpoint lives.
struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
};

class CheckpointReader {
 public:
  // Opens dir/model.safetensors or every shard named by dir/model.safetensors.index.json.
  // Index entries must name files inside `dir`; every listed tensor must exist in its shard.
  explicit CheckpointReader(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  // Sorted by name.
  const std::map<std::string, TensorRef>& tensors() const { return tensors_; }
  const TensorRef* find(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef> tensors_;
};

// "5GB" (10^9), "500MiB" (2^20), "123" bytes. Throws ConfigError naming `where`.
std::uint64_t parse_byte_size(const std::string& text, const std::string& where);

// Greedy shard plan over tensors in the given order: a shard is closed when the next tensor
// would take it past max_bytes; a tensor larger than max_bytes gets a shard of its own.
// Returns, per tensor, its shard index (0-based) and the shard count.
std::vector<std::size_t> plan_shards(const std::vector<std::uint64_t>& sizes, std::uint64_t max_bytes,
                                     std::size_t* shard_count);

// "model-00002-of-00005.safetensors" (index 1 of 5); "model.safetensors" when count == 1.
std::string shard_file_name(std::size_t index, std::size_t count);

// A ctune checkpoint written one file per rank keeps its weight tensors in this folder
// (train/state/sharded_checkpoint.h); readers of whole weights point users to `ctune consolidate`.
inline constexpr const char* kStateShardsDir = "shards";
// " (a sharded checkpoint: ...)" when `dir` is one; "" otherwise. Appended to "no weights" errors.
std::string sharded_checkpoint_hint(const std::filesystem::path& dir);

// Whether `dir` has a tokenizer (tokenizer.json or tokenizer.model).
bool has_tokenizer_files(const std::filesystem::path& dir);

// Copies the tokenizer files a Hugging Face model directory carries (tokenizer.json,
// tokenizer.model, tokenizer_config.json, special_tokens_map.json, generation_config.json,
// chat_template.jinja) from `source` into `dest`. IoError when none of tokenizer.json /
// tokenizer.model is there or a copy fails.
void copy_tokenizer_files(const std::filesystem::path& source, const std::filesystem::path& dest);
// The bytes copy_tokenizer_files would copy from `source` (0: none there).
std::int64_t tokenizer_files_bytes(const std::filesystem::path& source);

// Writes tensors (in state-dict order) as HF does: one file, or shards plus the index.
// Files go into `dir`, which must exist (callers use a StagingDir for atomicity).
void write_checkpoint_tensors(const std::filesystem::path& dir, const std::vector<TensorBytes>& tensors,
                              std::uint64_t max_shard_bytes);

}  // namespace ctune::io
