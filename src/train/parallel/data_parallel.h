// Data parallelism with replicated parameters (distributed.strategy: no_shard, as DDP): every
// rank holds the whole model and optimizer state, trains on its rows of each global batch, and
// the gradients are summed over ranks before the update, so every rank applies the same update
// and the run computes what one process would on the global batch (batch_size x world size
// rows per micro-batch). See docs/distributed.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "distributed/comm.h"
#include "train/method/distributed_plan.h"
#include "train/parallel/replicated_sync.h"
#include "train/state/sharded_checkpoint.h"
#include "train/step/trainer.h"

namespace ctune::train {

// This rank's rows of each global batch of `sampler`: rank r of n takes groups
// [r*G/n, (r+1)*G/n) of a batch of G groups (a group: one row, or a preference pair's two rows,
// which are never split). A short last batch may leave a rank none: it gets
// idle_batch() instead. Rows are placed on `device`.
class RankRows : public BatchSource {
 public:
  RankRows(data::Sampler& sampler, int rank, int size, at::Device device = at::kCPU)
      : sampler_(sampler), rank_(rank), size_(size), device_(device) {}
  TensorBatch next() override;

 private:
  data::Sampler& sampler_;
  int rank_, size_;
  at::Device device_;
};

class FullShard;
class ShardedOptimizer;

// The optimizer and step agreement for a strategy over `comm`'s ranks: one process (nothing to
// agree on), no_shard (train/parallel/replicated_sync.h), shard_grad_op (train/parallel/zero.h) or full_shard
// (train/parallel/full_shard.h, which also installs itself in the model), and hybrid_shard: full_shard
// within each node, the shards replicated across nodes (gradients reduce-scattered in the node,
// then summed over the nodes).
struct DataParallel {
  std::vector<std::unique_ptr<distributed::Comm>> groups;  // hybrid_shard: this node's ranks, and its replicas
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<StepSync> sync;
  std::shared_ptr<FullShard> full_shard;  // null unless the parameters themselves are sharded
  ShardedOptimizer* sharded = nullptr;    // `optimizer`, when its state is sharded
  // The shard file of a sharded checkpoint this rank writes (train/state/sharded_checkpoint.h): one
  // per rank holding distinct chunks; -1: none (rank > 0 of a replicated run, hybrid_shard's
  // ranks outside the first node, whose chunks node 0 already writes).
  int shard_index = 0, shard_count = 1;

  // Runs `use` with the whole model on this rank (to write a checkpoint or the result): under
  // full_shard every part is gathered first and freed after; otherwise the model is whole.
  void with_whole_model(const std::function<void()>& use);
  // What this rank writes of a sharded checkpoint: its slices of the trainable weights (by
  // `model`'s parameter names) and of the optimizer state; nothing is gathered.
  StateShard state_shard(model::CausalLM& model) const;
  // Where memory peaks inside backward (full_shard: a part whole with its gradients), `sample` is called.
  void sample_memory_with(std::function<void()> sample);
  // A frozen model beside the policy (a preference objective's reference) laid out as the
  // policy is: under full_shard and hybrid_shard sharded over the same ranks (offloaded with
  // it), each part gathered while it computes; otherwise whole, as the policy is.
  void shard_like_policy(model::CausalLM& frozen);
  std::function<void(model::CausalLM&)> shard_frozen;  // full_shard: shards a frozen model as the policy's parts
};
DataParallel make_data_parallel(const DistributedPlan& plan, model::CausalLM& model, std::vector<ParamGroup> groups,
                                const OptimizerOptions& options, distributed::Comm& comm);

// Rank r's share of the eval batches: every size-th batch from the r-th, padded with idle
// batches so every rank runs as many.
std::vector<TensorBatch> rank_share(std::vector<TensorBatch> batches, int rank, int size);

}  // namespace ctune::train
