// The data layer's flat batches as tensors for the trainer, and the sampler as a BatchSource.
#pragma once

#include <vector>

#include "data/batch.h"
#include "data/sampler.h"
#include "train/trainer.h"

namespace ctune::train {

TensorBatch to_tensors(const data::Batch& batch);

class SamplerSource : public BatchSource {
 public:
  explicit SamplerSource(data::Sampler& sampler) : sampler_(sampler) {}
  TensorBatch next() override { return to_tensors(sampler_.next()); }

 private:
  data::Sampler& sampler_;
};

// Every batch of a plan (at most `limit` when limit >= 0), as tensors.
std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit = -1);

}  // namespace ctune::train
