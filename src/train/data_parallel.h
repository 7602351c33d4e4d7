// Data parallelism with replicated parameters (distributed.strategy: no_shard, as DDP): every
// rank holds the whole model and optimizer state, trains on its rows of each global batch, and
// the gradients are summed over ranks before the update, so every rank applies the same update
// and the run computes what one process would on the global batch (batch_size x world size
// rows per micro-batch). See docs/distributed.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "dist/comm.h"
#include "train/trainer.h"

namespace ctune::train {

class ReplicatedSync : public StepSync {
 public:
  explicit ReplicatedSync(dist::Comm& comm) : comm_(comm) {}
  void sum(std::vector<double>& values) override;
  // One all-reduce of every gradient, flattened into one fp32 buffer.
  void reduce_gradients(const std::vector<ParamGroup>& groups) override;
  int agree_on_stop(int signal) override;

 private:
  dist::Comm& comm_;
};

// This rank's rows of each global batch of `sampler`: rank r of n takes rows
// [r*R/n, (r+1)*R/n) of a batch of R rows (a short last batch may leave a rank none).
class RankRows : public BatchSource {
 public:
  RankRows(data::Sampler& sampler, int rank, int size) : sampler_(sampler), rank_(rank), size_(size) {}
  TensorBatch next() override;

 private:
  data::Sampler& sampler_;
  int rank_, size_;
};

// The optimizer and step agreement for a strategy over `comm`'s ranks: one process (nothing to
// agree on), no_shard (ReplicatedSync above), or shard_grad_op (train/zero.h).
struct DataParallel {
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<StepSync> sync;
};
DataParallel make_data_parallel(const std::string& strategy, std::vector<ParamGroup> groups, const OptimizerOptions& options,
                                dist::Comm& comm);

// Rank r's share of the eval batches: every size-th batch from the r-th.
std::vector<TensorBatch> rank_share(std::vector<TensorBatch> batches, int rank, int size);

}  // namespace ctune::train
