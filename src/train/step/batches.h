// The data layer's flat batches as tensors for the trainer (the sampler as a BatchSource is
// train/parallel/data_parallel.h's RankRows: one process is rank 0 of 1).
#pragma once

#include <vector>

#include "data/batch.h"
#include "data/sampler.h"
#include "train/step/trainer.h"

namespace ctune::train {

// On `device` (the recipe's; batches are built on the host and copied there).
TensorBatch to_tensors(const data::Batch& batch, const at::Device& device = at::kCPU);

// Rows of a prompt followed by its completion (a sampled one: online RL, distillation), laid
// out as the data layer lays out a batch: right-padded with `pad_id`, positions from 0, one
// document per row; the completion's tokens are the targets where `trained` says so (every row
// when it is empty). `examples`: each row's example. Rows as long as the longest, at least 1.
data::Batch prompt_completion_rows(const std::vector<const std::vector<std::int32_t>*>& prompts,
                                   const std::vector<std::vector<std::int64_t>>& completions, const std::vector<bool>& trained,
                                   std::vector<std::int64_t> examples, std::int64_t pad_id);

// A batch that trains on nothing: one row of two tokens and no target. A rank with no rows
// computes on it so that every rank runs the same forward and backward (under full_shard they
// are full of collectives); it adds no target, no loss and exactly zero gradients.
TensorBatch idle_batch();

// Every batch of a plan (at most `limit` when limit >= 0), as tensors on `device`; `eval_split`:
// the plan is over the eval split's examples.
std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit = -1, const at::Device& device = at::kCPU,
                                     bool eval_split = false);

}  // namespace ctune::train
