// Step checkpoints: output_dir/checkpoints/step_NNNNNNNN/ holding the weights (LoRA adapter in
// PEFT layout, or the full model in Hugging Face layout with the tokenizer files), the resolved
// recipe, the training state (step, data cursor, optimizer, RNG) and MANIFEST.json, written last.
// Each checkpoint is staged under a temporary name, fsync'ed and renamed into place, so it either
// exists complete or not at all; the newest usable one is found by verifying manifests, never
// through a pointer file that can go stale. A sharded checkpoint (train/state/sharded_checkpoint.h)
// holds, instead of the weight tensors and optimizer.safetensors, one file per rank under
// shards/; rank 0 writes the rest and the manifest once every rank's shard is written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/sampler.h"
#include "distributed/comm.h"
#include "io/file.h"
#include "io/manifest.h"
#include "io/run_dir.h"
#include "model/decoder.h"
#include "train/method/method.h"
#include "train/state/sharded_checkpoint.h"
#include "train/step/grad_scaler.h"
#include "train/step/optimizer.h"
#include "train/step/trainer.h"

namespace ctune::train {

// What a checkpoint is written from.
struct CheckpointSources {
  model::CausalLM model{nullptr};
  const Method* method = nullptr;  // writes the weights (model or adapter)
  WeightFiles files;
  // Optimizer::state(), taken by every rank (a sharded optimizer gathers it) before rank 0 writes.
  std::vector<std::pair<std::string, at::Tensor>> optimizer_state;
  const data::Sampler* sampler = nullptr;
  std::string recipe_yaml;             // the resolved recipe, saved as recipe.yaml
  const GradScaler* scaler = nullptr;  // fp16 loss scaling (its state is saved); null: none
  Json inputs = Json::object();        // what the run depends on: {name: {path, fingerprint}}
  // What the batch source holds between steps (a pending generation batch); null: nothing.
  // Every rank takes it before a checkpoint is written (train/run/checkpoint_cadence.h), each
  // rank's gathered into `source_state` under several ranks: {"ranks": [each rank's note]},
  // tensors named "r<rank>.<name>" (split_source_state takes a rank's part back).
  const BatchSource* source = nullptr;
  SourceState source_state;
  // Files of the run directory the steps depend on (objective.precompute_reference's table), by
  // name relative to it, with their size and checksum: a resumed run verifies them against this
  // record, which the checkpoint's manifest covers, before using them.
  std::vector<io::ManifestEntry> run_files;
  // What the run runs beside itself, to warn on --resume when it changed (not to refuse: a fixed
  // grader should be usable): {"reward.command": {path: fingerprint}} (reward_command.h).
  Json programs = Json::object();
};

// Rank `rank`'s part of a source state gathered from `ranks` ranks (the note and tensors its
// BatchSource::state() gave), or the state itself for one process; FormatError when the
// checkpoint was written by another number of ranks.
SourceState split_source_state(const SourceState& state, int rank, int ranks);

// This rank's part of a sharded checkpoint.
struct ShardPart {
  StateShard shard;    // what it holds of the trainable weights and the optimizer state
  int index = 0;       // its shard file, of `count`; -1: it writes none
  int count = 1;
};

// What read_training_state() returns.
struct TrainingState {
  std::int64_t step = 0;
  data::SamplerState sampler;
  std::vector<std::pair<std::string, at::Tensor>> optimizer;
  std::optional<GradScalerState> scaler;  // present when the run used loss scaling
  std::vector<std::pair<std::string, at::Tensor>> rng;  // "cpu", "cuda:0", ...
  std::string recipe_yaml;
  Json inputs;  // as CheckpointSources::inputs wrote it; null in checkpoints that predate it
  std::optional<std::vector<io::ManifestEntry>> run_files;  // as CheckpointSources::run_files; nullopt in older checkpoints
  Json programs = Json::object();  // as CheckpointSources::programs wrote it; empty in older ones
  SourceState source;  // the batch source's state (note null: none saved)
};

class CheckpointManager {
 public:
  CheckpointManager(std::filesystem::path output_dir, std::int64_t keep_last);

  static std::filesystem::path dir_for(const std::filesystem::path& output_dir, std::int64_t step);

  // Writes the checkpoint of `step` (replacing a damaged one of the same step), then removes
  // checkpoints beyond keep_last and leftovers of interrupted writes. Returns its directory.
  std::filesystem::path write(std::int64_t step, const CheckpointSources& sources);

  // The newest checkpoint whose manifest verifies (sizes and checksums, a training state
  // listed). Every newer one that does not is described in `skipped` ("<dir>: <problem>").
  std::optional<std::filesystem::path> latest(std::vector<std::string>* skipped) const;

  // Removes verified checkpoints beyond the newest keep_last, and leftovers of interrupted
  // writes (also done after every write; a run killed between its last write and this cleanup
  // is tidied on resume). A checkpoint that does not verify is never counted (nor deleted: it
  // is left for inspection), and a protected one is never deleted.
  void apply_retention() const;

  // The same as a sharded checkpoint, written by every rank of `comm` (a collective): rank 0
  // stages the directory, every rank with a shard writes it there, and after a barrier rank 0
  // writes the weights' metadata (Method::write_weight_metadata), the training state and the
  // manifest, and commits; `sources.optimizer_state` is not used. No rank gathers anything.
  void write_sharded(std::int64_t step, const CheckpointSources& sources, const model::ModelConfig& config, const ShardPart& part,
                     distributed::Comm& comm);

  // The checkpoint this run resumed from: kept whatever keep_last says.
  void protect(const std::filesystem::path& checkpoint);

 private:
  bool verified(const std::filesystem::path& dir) const;
  // trainer_state.json, rng.safetensors and recipe.yaml (and, when `optimizer` is given,
  // optimizer.safetensors) into `dir`.
  void write_state(const std::filesystem::path& dir, std::int64_t step, const CheckpointSources& s, const char* layout,
                   const std::vector<std::pair<std::string, at::Tensor>>* optimizer) const;
  // The manifest, then the rename into place and retention.
  void finish(io::StagingDir& staging, const std::filesystem::path& target, std::int64_t step);

  std::filesystem::path root_;
  std::int64_t keep_last_;
  std::filesystem::path protected_;
  mutable std::set<std::filesystem::path> verified_;  // verified once per process (or written by it)
};

// "" when `dir` is a complete, intact checkpoint (its manifest verifies and lists the training
// state); otherwise what is wrong, naming the file.
std::string verify_checkpoint(const std::filesystem::path& dir);

// Reads trainer_state.json, optimizer.safetensors (of a sharded checkpoint: the optimizer
// state assembled from its shards), rng.safetensors and recipe.yaml of a checkpoint. Throws
// FormatError naming the file.
TrainingState read_training_state(const std::filesystem::path& checkpoint);

// The inputs a checkpoint's run read (model.path, data.train, ...), by name, from its trainer
// state: what a command writing results from the checkpoint must not overwrite. Empty when the
// state records none (an older checkpoint) or cannot be read.
io::NamedPaths checkpoint_inputs(const std::filesystem::path& checkpoint);

// What consolidate_checkpoint() wrote.
struct Consolidated {
  std::string method;  // "full" (a Hugging Face model) or "lora" (a PEFT adapter)
  std::int64_t step = 0;
  int shards = 0;
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // as written, by parameter name
};

// Writes a sharded checkpoint's weights whole into `dir` (an existing directory, e.g. staged):
// the files rank 0 wrote beside the shards (config.json and the tokenizer files, or
// adapter_config.json) and the tensors assembled from every shard, in the method's layout. The
// result is what a whole checkpoint's weights are. FormatError when `checkpoint` does not
// verify or is not sharded.
Consolidated consolidate_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& dir,
                                    std::uint64_t max_shard_bytes);

// Restores the process RNG states saved by a checkpoint (CPU, and CUDA devices when present).
void restore_rng(const std::vector<std::pair<std::string, at::Tensor>>& rng);

}  // namespace ctune::train
