#include "train/parallel/zero.h"

#include <ATen/core/grad_mode.h>
#include <map>

#include <ATen/ATen.h>

#include "core/error.h"

namespace ctune::train {

namespace {

// "adamw.exp_avg.3" -> ("adamw.exp_avg", 3); entries without a trailing index ("adamw.step")
// are not per parameter.
bool split_index(const std::string& name, std::string& prefix, std::size_t& index) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size()) return false;
  for (std::size_t i = dot + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  prefix = name.substr(0, dot);
  index = std::stoul(name.substr(dot + 1));
  return true;
}

}  // namespace

std::vector<FlatGroup> ShardedOptimizer::buckets(const std::vector<ParamGroup>& groups, const distributed::Comm& comm) {
  std::vector<FlatGroup> out;
  std::vector<at::Tensor> params;
  std::vector<std::size_t> indices;
  std::size_t index = 0;
  for (const auto& g : groups) {
    std::int64_t filled = 0;
    for (const auto& p : g.params) {
      if (!params.empty() && filled + p.numel() > kBucketElements) {
        out.push_back({std::make_shared<FlatParam>(std::move(params), std::move(indices), comm, true), g.weight_decay});
        params.clear();
        indices.clear();
        filled = 0;
      }
      params.push_back(p);
      indices.push_back(index++);
      filled += p.numel();
    }
    if (!params.empty()) out.push_back({std::make_shared<FlatParam>(std::move(params), std::move(indices), comm, true), g.weight_decay});
    params.clear();
    indices.clear();
  }
  return out;
}

ShardedOptimizer::ShardedOptimizer(std::vector<FlatGroup> flats, const OptimizerOptions& options, distributed::Comm& comm,
                                   bool gather_after_step)
    : Optimizer({}), comm_(comm), flats_(std::move(flats)), gather_after_step_(gather_after_step) {
  for (const auto& f : flats_) {
    TORCH_CHECK(f.flat->shard().scalar_type() == at::kFloat, "sharded optimizer state needs fp32 trainable parameters, found ",
                f.flat->shard().scalar_type());
    groups_.push_back({{f.flat->shard()}, f.weight_decay});
  }
  inner_ = make_optimizer(groups_, options);
}

void ShardedOptimizer::reduce_scatter_gradients() {
  // The ranks agree which flats hold a gradient (with experts, a rank may have none where
  // another has some), so each issues the same reduce-scatters; a missing one counts as zeros.
  at::Tensor pending = at::zeros({static_cast<std::int64_t>(flats_.size())}, at::kLong);
  for (std::size_t i = 0; i < flats_.size(); ++i) pending[static_cast<std::int64_t>(i)] = flats_[i].flat->has_gradients() ? 1 : 0;
  comm_.all_reduce_max(pending, "agreeing which gradients to reduce");
  const auto* p = pending.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < flats_.size(); ++i)
    if (p[i] != 0) flats_[i].flat->reduce_scatter_gradients(comm_);
}

void ShardedOptimizer::step(double lr) {
  ++steps_;
  inner_->step(lr);
  if (!gather_after_step_) return;
  at::NoGradGuard no_grad;
  for (auto& f : flats_) f.flat->gather(comm_, "gathering updated parameters");
}

std::vector<std::pair<std::string, at::Tensor>> ShardedOptimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, t] : inner_->state()) {
    std::string prefix;
    std::size_t i = 0;
    if (!split_index(name, prefix, i)) {
      out.emplace_back(name, t);
      continue;
    }
    const FlatParam& f = *flats_.at(i).flat;
    at::Tensor full = at::empty({f.chunk() * comm_.size()}, t.options());
    comm_.all_gather(t.reshape({-1}), full, "gathering optimizer state for a checkpoint");
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < f.params().size(); ++k) {
      const auto n = f.params()[k].numel();
      out.emplace_back(prefix + "." + std::to_string(f.indices()[k]), full.narrow(0, offset, n).view(f.params()[k].sizes()));
      offset += n;
    }
  }
  return out;
}

std::vector<TensorSlice> ShardedOptimizer::state_slices() const {
  std::vector<TensorSlice> out;
  for (const auto& [name, t] : inner_->state()) {
    std::string prefix;
    std::size_t i = 0;
    if (!split_index(name, prefix, i)) {
      if (comm_.rank() == 0) out.push_back({name, t.sizes().vec(), 0, t.reshape({-1})});
      continue;
    }
    const FlatParam& f = *flats_.at(i).flat;
    for (auto& piece : f.pieces_of(t)) {
      const at::Tensor& p = f.params()[piece.k];
      out.push_back({prefix + "." + std::to_string(f.indices()[piece.k]), p.sizes().vec(), piece.offset, piece.data});
    }
  }
  return out;
}

void ShardedOptimizer::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  // One process's entries per parameter, regrouped into this rank's chunk of each flat group.
  std::map<std::string, std::map<std::size_t, at::Tensor>> per_parameter;
  std::vector<std::pair<std::string, at::Tensor>> mine;
  for (const auto& [name, t] : state) {
    std::string prefix;
    std::size_t i = 0;
    if (split_index(name, prefix, i)) {
      per_parameter[prefix][i] = t;
    } else {
      mine.emplace_back(name, t);
    }
  }
  for (const auto& [prefix, entries] : per_parameter) {
    std::size_t used = 0;
    for (std::size_t g = 0; g < flats_.size(); ++g) {
      const FlatParam& f = *flats_[g].flat;
      std::vector<at::Tensor> parts;
      for (std::size_t k = 0; k < f.params().size(); ++k) {
        const auto it = entries.find(f.indices()[k]);
        if (it == entries.end()) break;
        if (it->second.numel() != f.params()[k].numel()) {
          throw ShapeError("optimizer state: \"" + prefix + "." + std::to_string(it->first) + "\" has " +
                           std::to_string(it->second.numel()) + " elements, its parameter " + std::to_string(f.params()[k].numel()));
        }
        parts.push_back(it->second.reshape({-1}).to(at::kFloat));
      }
      if (parts.empty()) continue;  // no state yet for this group (SGD before its first step)
      if (parts.size() != f.params().size()) throw FormatError("optimizer state: \"" + prefix + "\" lacks entries for some parameters");
      used += parts.size();
      const auto whole = f.chunk() * comm_.size();
      if (whole > f.numel()) parts.push_back(at::zeros({whole - f.numel()}, at::kFloat));
      mine.emplace_back(prefix + "." + std::to_string(g), at::cat(parts).narrow(0, comm_.rank() * f.chunk(), f.chunk()).clone());
    }
    if (used != entries.size()) {
      throw ShapeError("optimizer state: " + std::to_string(entries.size()) + " \"" + prefix + "\" entries for " + std::to_string(used) +
                       " trainable parameters");
    }
  }
  inner_->load_state(mine);
  steps_ = inner_->steps();
}

}  // namespace ctune::train
