// How a run shares its work over ranks: the resolved distributed.* keys (train/run/run_plan.h reads
// them; train/parallel/data_parallel.h carries them out). See docs/distributed.md.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/world.h"

namespace ctune::train {

struct DistributedPlan {
  std::string strategy = "no_shard";
  std::string backend = "gloo";  // resolved from distributed.backend: auto
  bool cpu_offload = false;  // full_shard/hybrid_shard: shards in host memory
  bool prefetch = false;     // full_shard/hybrid_shard: gather the next part while one computes

  // How many ranks share the gradients and optimizer state, and the parameters, under this
  // strategy in `world` (hybrid_shard shards within a node).
  std::int64_t optimizer_shards(const distributed::World& world) const {
    if (strategy == "hybrid_shard") return world.local_size;
    return strategy == "no_shard" ? 1 : world.size;
  }
  std::int64_t parameter_shards(const distributed::World& world) const {
    if (strategy == "hybrid_shard") return world.local_size;
    return strategy == "full_shard" ? world.size : 1;
  }
};

}  // namespace ctune::train
