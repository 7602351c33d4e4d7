#include "train/parallel/data_parallel.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "data/example.h"
#include "train/parallel/full_shard.h"
#include "train/parallel/zero.h"
#include "train/step/batches.h"

namespace ctune::train {

TensorBatch RankRows::next() {
  const data::Batch all = sampler_.next();
  // Whole groups (a preference pair's two rows) go to one rank.
  const auto group = std::max<std::int64_t>(1, all.rows_per_group), groups = all.rows / group;
  const auto begin = groups * rank_ / size_ * group, end = groups * (rank_ + 1) / size_ * group;
  return begin < end ? to_tensors(all.slice_rows(begin, end), device_) : idle_batch();
}

namespace {

// full_shard's step agreement: what the backward nodes did not reduce, reduced at the end;
// figures over the shards summed over the ranks that hold them (hybrid_shard: the node's).
class FullShardSync : public ReplicatedSync {
 public:
  FullShardSync(distributed::Comm& world, distributed::Comm& shard_group, FullShard& shards)
      : ReplicatedSync(world), shard_group_(shard_group), shards_(shards) {}
  void reduce_gradients(const std::vector<ParamGroup>& /*shards*/) override { shards_.flush(); }
  void sum_over_shards(std::vector<double>& values) override { sum_over(shard_group_, values, "summing over the shards"); }

 private:
  distributed::Comm& shard_group_;
  FullShard& shards_;
};

}  // namespace

void DataParallel::with_whole_model(const std::function<void()>& use) {
  if (!full_shard) {
    use();
    return;
  }
  full_shard->gather_all();
  use();
  full_shard->release_all();
}

StateShard DataParallel::state_shard(model::CausalLM& model) const {
  StateShard out;
  if (shard_index < 0) return out;
  std::map<const void*, std::string> names;  // each parameter once, under its first name
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : model->named_parameters(true)) {
    if (names.emplace(item.value().unsafeGetTensorImpl(), item.key()).second && item.value().requires_grad()) {
      trainable.emplace_back(item.key(), item.value());
    }
  }
  if (sharded == nullptr) {
    for (const auto& [name, p] : trainable) out.weights.push_back({name, p.sizes().vec(), 0, p.detach().reshape({-1})});
    for (const auto& [name, t] : optimizer->state()) out.optimizer.push_back({name, t.sizes().vec(), 0, t.reshape({-1})});
    return out;
  }
  for (const auto& g : sharded->flats()) {
    const FlatParam& flat = *g.flat;
    for (auto& piece : flat.pieces_of(flat.shard().detach())) {
      const at::Tensor& p = flat.params()[piece.k];
      out.weights.push_back({names.at(p.unsafeGetTensorImpl()), p.sizes().vec(), piece.offset, piece.data});
    }
  }
  out.optimizer = sharded->state_slices();
  return out;
}

void DataParallel::sample_memory_with(std::function<void()> sample) {
  if (full_shard) full_shard->sample_memory = std::move(sample);
}

void DataParallel::shard_like_policy(model::CausalLM& frozen) {
  if (shard_frozen && frozen) shard_frozen(frozen);
}

DataParallel make_data_parallel(const DistributedPlan& plan, model::CausalLM& model, std::vector<ParamGroup> groups,
                                const OptimizerOptions& options, distributed::Comm& comm) {
  const std::string& strategy = plan.strategy;
  DataParallel out;
  if (strategy == "shard_grad_op") {
    auto sharded = std::make_unique<ShardedOptimizer>(ShardedOptimizer::buckets(groups, comm), options, comm, /*gather_after_step=*/true);
    out.sync = std::make_unique<ShardedSync>(comm, *sharded);
    out.sharded = sharded.get();
    out.shard_index = comm.rank();
    out.shard_count = comm.size();
    out.optimizer = std::move(sharded);
    return out;
  }
  if (strategy == "full_shard" || strategy == "hybrid_shard") {
    distributed::Comm* shard_group = &comm;
    distributed::Comm* replicas = nullptr;
    if (strategy == "hybrid_shard") {
      // Ranks fill nodes in order: node k holds ranks [k*L, (k+1)*L); rank r's replicas are the
      // ranks with its local rank in the other nodes.
      const auto& w = comm.world();
      std::vector<int> node, same_local;
      for (int r = 0; r < w.local_size; ++r) node.push_back(w.node() * w.local_size + r);
      for (int k = 0; k < w.nodes(); ++k) same_local.push_back(k * w.local_size + w.local_rank);
      out.groups.push_back(comm.subgroup("node" + std::to_string(w.node()), node));
      out.groups.push_back(comm.subgroup("local" + std::to_string(w.local_rank), same_local));
      shard_group = out.groups[0].get();
      replicas = out.groups[1]->size() > 1 ? out.groups[1].get() : nullptr;
    }
    const FullShard::Options shard_options{plan.cpu_offload, plan.prefetch};
    out.full_shard = std::make_shared<FullShard>(model, groups, *shard_group, replicas, shard_options);
    out.shard_frozen = [=](model::CausalLM& frozen) {
      std::make_shared<FullShard>(frozen, std::vector<ParamGroup>{}, *shard_group, replicas, shard_options)->install(frozen);
    };
    out.full_shard->install(model);
    auto sharded = std::make_unique<ShardedOptimizer>(out.full_shard->trainable(), options, *shard_group, /*gather_after_step=*/false);
    out.sharded = sharded.get();
    out.optimizer = std::move(sharded);
    // The first shard group's ranks write the shards (full_shard: every rank; hybrid_shard: node 0's,
    // ranks [0, node size)); the other nodes hold copies of the same chunks.
    out.shard_index = comm.rank() < shard_group->size() ? shard_group->rank() : -1;
    out.shard_count = shard_group->size();
    out.sync = std::make_unique<FullShardSync>(comm, *shard_group, *out.full_shard);
    return out;
  }
  if (strategy != "no_shard") throw UnsupportedError("distributed.strategy: " + strategy + " is not implemented in this build");
  out.optimizer = make_optimizer(std::move(groups), options);
  out.shard_index = comm.rank() == 0 ? 0 : -1;  // replicated: rank 0 holds it all
  out.sync = comm.size() > 1 ? std::make_unique<ReplicatedSync>(comm) : std::make_unique<StepSync>();
  return out;
}

std::vector<TensorBatch> rank_share(std::vector<TensorBatch> batches, int rank, int size) {
  std::vector<TensorBatch> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < batches.size(); i += static_cast<std::size_t>(size)) {
    mine.push_back(std::move(batches[i]));
  }
  const std::size_t each = (batches.size() + static_cast<std::size_t>(size) - 1) / static_cast<std::size_t>(size);
  while (mine.size() < each) mine.push_back(idle_batch());
  return mine;
}

}  // namespace ctune::train
