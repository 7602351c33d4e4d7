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

// A batch that trains on nothing: one row of two tokens and no target. A rank with no rows
// computes on it so that every rank runs the same forward and backward (under full_shard they
// are full of collectives); it adds no target, no loss and exactly zero gradients.
TensorBatch idle_batch();

// Every batch of a plan (at most `limit` when limit >= 0), as tensors on `device`; `eval_split`:
// the plan is over the eval split's examples.
std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit = -1, const at::Device& device = at::kCPU,
                                     bool eval_split = false);

}  // namespace ctune::train
