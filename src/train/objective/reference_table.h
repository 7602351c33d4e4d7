// objective.precompute_reference: the reference's summed log-probability of every response of
// both splits, computed in one pass over the data before training (no gradients), so that no
// reference forward (and, under full fine-tuning, no reference copy) is needed while training.
// The table is kept with the run (output_dir/reference_logps.safetensors, float64), so a
// resumed run reuses exactly those numbers and stays bit-identical. TRL's
// precompute_ref_log_probs; docs/objectives.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "core/progress.h"
#include "model/decoder.h"
#include "train/step/loss.h"

namespace ctune::train {

struct ReferenceTable {
  std::vector<double> train, eval;  // per example of each split (a pair: two consecutive entries)
  std::uint64_t fingerprint = 0;    // of the examples of both splits (data::fingerprint)

  // The rows' entries, [rows] float64 on `batch`'s device; a row without an example (a rank's
  // idle batch, a packed row) gets 0. FormatError for an index outside the table.
  at::Tensor lookup(const TensorBatch& batch) const;
};

// Over `train` then `eval` batches (each row's example index set), without gradients:
// `reference`'s summed log-probabilities, or the policy's with its adapters off when `reference`
// is null (LoRA). Every rank runs the same forwards (full_shard gathers inside them).
ReferenceTable compute_reference_table(model::CausalLM& policy, model::CausalLM reference, const std::vector<TensorBatch>& train,
                                       std::int64_t train_examples, const std::vector<TensorBatch>& eval, std::int64_t eval_examples,
                                       Stage* stage = nullptr);

void write_reference_table(const std::filesystem::path& path, const ReferenceTable& table);
// The table at `path` when it was computed on examples with `fingerprint` and has their counts;
// nullopt when there is no file. FormatError for a damaged file or another dataset's table.
std::optional<ReferenceTable> read_reference_table(const std::filesystem::path& path, std::uint64_t fingerprint,
                                                   std::int64_t train_examples, std::int64_t eval_examples);

}  // namespace ctune::train
