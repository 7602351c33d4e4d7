// How replicated ranks agree each step (distributed.strategy: no_shard, and the base of the
// sharded strategies' agreement in train/parallel/zero.h and data_parallel.cpp): the step's counts and
// losses summed, every gradient all-reduced, the highest stop signal taken. See
// docs/distributed.md.
#pragma once

#include <vector>

#include "distributed/comm.h"
#include "train/step/trainer.h"

namespace ctune::train {

class ReplicatedSync : public StepSync {
 public:
  explicit ReplicatedSync(distributed::Comm& comm) : comm_(comm) {}
  void sum(std::vector<double>& values) override;
  // One all-reduce of every gradient, flattened into one fp32 buffer.
  void reduce_gradients(const std::vector<ParamGroup>& groups) override;
  int agree_on_stop(int signal) override;

 private:
  distributed::Comm& comm_;
};

// `values` summed over `comm`'s ranks, in place (fp64), as collective `what`.
void sum_over(distributed::Comm& comm, std::vector<double>& values, const char* what);

}  // namespace ctune::train
