// The data layer's flat batches as tensors for the trainer (the sampler as a BatchSource is
// train/data_parallel.h's RankRows: one process is rank 0 of 1).
#pragma once

#include <vector>

#include "data/batch.h"
#include "data/sampler.h"
#include "train/trainer.h"

namespace ctune::train {

TensorBatch to_tensors(const data::Batch& batch);

// Every batch of a plan (at most `limit` when limit >= 0), as tensors.
std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit = -1);

}  // namespace ctune::train
