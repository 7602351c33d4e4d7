// The training sampler: a deterministic, resumable stream of batches over the training
// examples. Each epoch's order is a Fisher-Yates permutation seeded by (seed, epoch) (see
// shuffle.h), batched by a BatchPlan (unpacked or packed, batch.h). The cursor is (epoch,
// position = index of the next batch in that epoch); state()/restore() save and restore it
// with a fingerprint of the examples and the batching options, so a checkpoint cannot resume
// silently on a different dataset or batch shape.
//
//   data::Sampler sampler(ds.train, data::sampler_options(options, *tok));
//   while (sampler.epoch() < epochs) { data::Batch b = sampler.next(); ... }
//   checkpoint["data"] = sampler.state().to_json();      // and on resume:
//   sampler.restore(data::SamplerState::from_json(checkpoint["data"], "trainer_state.json"));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/options.h"
#include "tokenizer/tokenizer.h"

namespace ctune::data {

struct SamplerOptions {
  BatchOptions batch;
  bool shuffle = true;
  std::uint64_t seed = 0;
};

// From the recipe: batch_size, max_seq_len, packing, shuffle, seed, and the pad id of the
// tokenizer (0 when it has none).
SamplerOptions sampler_options(const DataOptions& options, const tok::Tokenizer& tokenizer);
// For eval batches: the same shape, never shuffled, and no document split over rows (so every
// target is scored exactly once, whatever data.packing_split says).
BatchOptions batch_options(const DataOptions& options, const tok::Tokenizer& tokenizer);

struct SamplerState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // next batch within the epoch
  // What the cursor is only meaningful with; restore() refuses a state saved with others.
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool packing = false;
  std::int64_t packing_window = 0;  // absent in checkpoints from before bin-packing: 0
  bool packing_split = false;
  std::int64_t batch_size = 0;
  std::int64_t rows_per_group = 1;  // 2: preference pairs (absent in older checkpoints: 1)
  std::int64_t max_seq_len = 0;
  std::int64_t num_examples = 0;
  std::uint64_t fingerprint = 0;  // FNV-1a of every example's ids and labels

  // {"epoch", "position", "seed", "shuffle", "packing", "packing_window", "packing_split",
  //  "batch_size", "rows_per_group", "max_seq_len", "num_examples", "fingerprint": "0123abcd..."}
  Json to_json() const;
  // FormatError naming `where` for a missing or mistyped key.
  static SamplerState from_json(const Json& json, const std::string& where);
};

class Sampler {
 public:
  using State = SamplerState;

  Sampler(Examples examples, const SamplerOptions& options);

  // The batch at the cursor; advances it, into the next epoch after an epoch's last batch.
  Batch next();

  std::int64_t epoch() const { return epoch_; }        // epoch of the next batch, from 0
  std::int64_t position() const { return position_; }  // its index within the epoch
  // Batches of the current epoch. Unpacked: ceil(examples / batch_size) in every epoch;
  // packed: depends on how the epoch's order packs, so it can differ slightly between epochs.
  std::int64_t batches_per_epoch() const { return plan_.size(); }
  // The current epoch's rows (their count and document tokens: how full packing gets them).
  const BatchPlan& plan() const { return plan_; }
  std::int64_t batches_in_epoch(std::int64_t epoch) const;
  // Indices of the examples in the order epoch `epoch` visits them.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;

  SamplerState state() const;
  // ConfigError when `state` was saved with other examples or options, or points past its epoch.
  void restore(const SamplerState& state);

 private:
  void start_epoch(std::int64_t epoch);

  Examples examples_;
  SamplerOptions options_;
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  BatchPlan plan_;
};

// FNV-1a over the examples' lengths, ids and labels.
std::uint64_t fingerprint(const std::vector<Example>& examples);

}  // namespace ctune::data
