// Sharded optimizer state (distributed.strategy: shard_grad_op, as ZeRO-2 / FSDP SHARD_GRAD_OP):
// every rank keeps whole parameters for forward and backward, but owns 1/N of each parameter
// group's elements for the update. The group's parameters are re-seated as views of flat
// buffers (buckets of at most 16 MiB), each split into N equal chunks (the last padded with
// zeros); after backward each flat
// gradient is reduce-scattered so rank r holds the summed gradient of chunk r only, the
// optimizer (AdamW or SGD, unchanged) updates that chunk with its chunk of the state, and an
// all-gather puts every rank's updated chunk back into the flat buffer. Optimizer state per
// rank: 1/N of the single-process figure. See docs/distributed.md.
#pragma once

#include <memory>
#include <vector>

#include "dist/comm.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"

namespace ctune::train {

class ShardedOptimizer : public Optimizer {
 public:
  // `groups`: the model's trainable parameters (fp32), re-seated into flat buffers here.
  ShardedOptimizer(std::vector<ParamGroup> groups, const OptimizerOptions& options, dist::Comm& comm);

  // The model's gradients summed over ranks into this rank's chunks (groups() hold the chunks
  // with their gradients); the model's own gradients are released.
  void reduce_scatter_gradients();
  // Updates this rank's chunks, then gathers every rank's chunks into the parameters.
  void step(double lr) override;
  // The state of every parameter, gathered from all ranks, named as one process names it
  // (so a checkpoint resumes at any world size). A collective: every rank calls it.
  std::vector<std::pair<std::string, at::Tensor>> state() const override;
  // One process's state (any world size's checkpoint): this rank keeps its chunks.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) override;

 private:
  struct Flat {
    std::vector<at::Tensor> params;  // the model's parameters, views of `buffer`
    at::Tensor buffer;               // [chunk * ranks] fp32
    std::int64_t numel = 0;          // elements in use (the rest is padding)
    std::int64_t chunk = 0;
    std::size_t first_index = 0;     // the first parameter's index in one process's numbering
  };
  static std::vector<ParamGroup> chunks_of(std::vector<Flat>& flats, const std::vector<ParamGroup>& groups, int rank);

  dist::Comm& comm_;
  std::vector<Flat> flats_;
  std::unique_ptr<Optimizer> inner_;  // steps groups_ (this rank's chunks)
};

// The step agreement of a sharded optimizer: gradients reduce-scattered into the shards, and
// figures over the optimizer's parameters (gradient norm, inf/NaN) summed over the shards.
class ShardedSync : public ReplicatedSync {
 public:
  ShardedSync(dist::Comm& comm, ShardedOptimizer& optimizer) : ReplicatedSync(comm), optimizer_(optimizer) {}
  void reduce_gradients(const std::vector<ParamGroup>& /*shards*/) override { optimizer_.reduce_scatter_gradients(); }
  void sum_over_shards(std::vector<double>& values) override { sum(values); }

 private:
  ShardedOptimizer& optimizer_;
};

}  // namespace ctune::train
