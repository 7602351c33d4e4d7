#include "train/data_parallel.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "train/batches.h"
#include "train/zero.h"

namespace ctune::train {

void ReplicatedSync::sum(std::vector<double>& values) {
  at::Tensor t = at::tensor(values, at::kDouble);
  comm_.all_reduce_sum(t, "summing the step's counts and losses");
  const double* p = t.data_ptr<double>();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = p[i];
}

void ReplicatedSync::reduce_gradients(const std::vector<ParamGroup>& groups) {
  // Every rank has the same parameters with the same graph, so the same gradients are defined
  // everywhere; their sum is one process's gradient of the global batch (each rank's loss is
  // already divided by the global target count).
  std::vector<at::Tensor> grads;
  for (const auto& g : groups)
    for (const auto& p : g.params)
      if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  std::vector<at::Tensor> flat_parts;
  for (const auto& g : grads) flat_parts.push_back(g.reshape({-1}).to(at::kFloat));
  at::Tensor flat = at::cat(flat_parts);
  comm_.all_reduce_sum(flat, "reducing gradients");
  std::int64_t offset = 0;
  for (auto& g : grads) {
    const auto n = g.numel();
    g.copy_(flat.narrow(0, offset, n).view(g.sizes()));
    offset += n;
  }
}

int ReplicatedSync::agree_on_stop(int signal) {
  at::Tensor t = at::tensor({static_cast<std::int64_t>(signal)}, at::kLong);
  comm_.all_reduce_max(t, "agreeing whether to stop");
  return static_cast<int>(t.item<std::int64_t>());
}

TensorBatch RankRows::next() {
  const data::Batch all = sampler_.next();
  return to_tensors(all.slice_rows(all.rows * rank_ / size_, all.rows * (rank_ + 1) / size_));
}

DataParallel make_data_parallel(const std::string& strategy, std::vector<ParamGroup> groups, const OptimizerOptions& options,
                                dist::Comm& comm) {
  DataParallel out;
  if (strategy == "shard_grad_op") {
    auto sharded = std::make_unique<ShardedOptimizer>(std::move(groups), options, comm);
    out.sync = std::make_unique<ShardedSync>(comm, *sharded);
    out.optimizer = std::move(sharded);
    return out;
  }
  if (strategy != "no_shard") throw UnsupportedError("distributed.strategy: " + strategy + " is not implemented in this build");
  out.optimizer = make_optimizer(std::move(groups), options);
  out.sync = comm.size() > 1 ? std::make_unique<ReplicatedSync>(comm) : std::make_unique<StepSync>();
  return out;
}

std::vector<TensorBatch> rank_share(std::vector<TensorBatch> batches, int rank, int size) {
  std::vector<TensorBatch> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < batches.size(); i += static_cast<std::size_t>(size)) {
    mine.push_back(std::move(batches[i]));
  }
  return mine;
}

}  // namespace ctune::train
