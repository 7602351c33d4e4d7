// Sharded optimizer state (distributed.strategy shard_grad_op, full_shard, hybrid_shard; as
// ZeRO-2/3 and FSDP): each rank owns 1/N of every trainable flat parameter (train/parallel/flat_param.h)
// and updates only that chunk, with its chunk of the optimizer state. After backward each flat
// gradient is reduce-scattered so rank r holds the summed gradient of chunk r; the optimizer
// (AdamW or SGD, unchanged) steps the chunks. Under shard_grad_op the whole parameters stay on
// every rank, so an all-gather puts every rank's updated chunk back into them after the step;
// under full_shard they are gathered block by block when the model needs them
// (train/parallel/full_shard.h). Optimizer state per rank: 1/N of one process's. See docs/distributed.md.
#pragma once

#include <memory>
#include <vector>

#include "distributed/comm.h"
#include "train/parallel/flat_param.h"
#include "train/parallel/replicated_sync.h"
#include "train/state/sharded_checkpoint.h"
#include "train/step/optimizer.h"

namespace ctune::train {

// shard_grad_op packs parameters into flat buffers of at most this many elements (16 MiB of
// fp32; one parameter larger than that gets a buffer of its own), so the reduce-scatter's
// temporaries (the flat gradient and what the all-to-all receives) stay this small. PyTorch's
// DDP buckets 25 MB.
inline constexpr std::int64_t kBucketElements = 4 << 20;

// A trainable flat parameter and the weight decay of its parameters.
struct FlatGroup {
  std::shared_ptr<FlatParam> flat;
  double weight_decay = 0.0;
};

class ShardedOptimizer : public Optimizer {
 public:
  // `flats`: every trainable parameter, in fp32, once. With `gather_after_step` the updated
  // chunks are gathered into the whole parameters after each step (shard_grad_op).
  ShardedOptimizer(std::vector<FlatGroup> flats, const OptimizerOptions& options, distributed::Comm& comm, bool gather_after_step);
  // shard_grad_op: `groups` (the model's trainable fp32 parameters) packed into flat buckets of
  // at most 16 MiB that keep their whole buffers.
  static std::vector<FlatGroup> buckets(const std::vector<ParamGroup>& groups, const distributed::Comm& comm);

  // Gradients still held by the parameters summed over ranks into this rank's chunks (groups()
  // hold the chunks with their gradients).
  void reduce_scatter_gradients();
  // Updates this rank's chunks (then gathers them into the parameters under shard_grad_op).
  void step(double lr) override;
  // The state of every parameter, gathered from all ranks, named as one process names it
  // (so a checkpoint resumes at any world size). A collective: every rank calls it.
  std::vector<std::pair<std::string, at::Tensor>> state() const override;
  // One process's state (any world size's checkpoint): this rank keeps its chunks.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) override;
  std::int64_t state_bytes() const override { return inner_->state_bytes(); }

  // The trainable flats, each holding this rank's chunk of its parameters (shard()).
  const std::vector<FlatGroup>& flats() const { return flats_; }
  // This rank's part of state() for a sharded checkpoint, without gathering: each per-parameter
  // entry sliced from this rank's chunk; entries not per parameter (the step count) from rank 0.
  std::vector<TensorSlice> state_slices() const;

 private:
  distributed::Comm& comm_;
  std::vector<FlatGroup> flats_;
  bool gather_after_step_;
  std::unique_ptr<Optimizer> inner_;  // steps groups_ (this rank's chunks)
};

// The step agreement of a sharded optimizer: gradients reduce-scattered into the shards, and
// figures over the optimizer's parameters (gradient norm, inf/NaN) summed over the shards.
class ShardedSync : public ReplicatedSync {
 public:
  ShardedSync(distributed::Comm& comm, ShardedOptimizer& optimizer) : ReplicatedSync(comm), optimizer_(optimizer) {}
  void reduce_gradients(const std::vector<ParamGroup>& /*shards*/) override { optimizer_.reduce_scatter_gradients(); }
  void sum_over_shards(std::vector<double>& values) override { sum(values); }

 private:
  ShardedOptimizer& optimizer_;
};

}  // namespace ctune::train
