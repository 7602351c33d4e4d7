#include "train/zero.h"

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

// Parameters are packed into flat buffers of at most this many elements (16 MiB of fp32; one
// parameter larger than that gets a buffer of its own), so the reduce-scatter's temporaries (the
// flat gradient and what the all-to-all receives) stay this small. PyTorch's DDP buckets 25 MB.
constexpr std::int64_t kBucketElements = 4 << 20;

ShardedOptimizer::ShardedOptimizer(std::vector<ParamGroup> groups, const OptimizerOptions& options, dist::Comm& comm)
    : Optimizer({}), comm_(comm) {
  at::NoGradGuard no_grad;
  const std::int64_t ranks = comm.size();
  // Buckets: consecutive parameters of one group; each bucket is one optimizer group.
  std::vector<ParamGroup> buckets;
  for (const auto& g : groups) {
    std::int64_t filled = kBucketElements;
    for (const auto& p : g.params) {
      TORCH_CHECK(p.scalar_type() == at::kFloat, "sharded optimizer state needs fp32 trainable parameters, found ", p.scalar_type());
      if (filled + p.numel() > kBucketElements) {
        buckets.push_back({{}, g.weight_decay});
        filled = 0;
      }
      buckets.back().params.push_back(p);
      filled += p.numel();
    }
  }
  std::size_t index = 0;
  for (const auto& g : buckets) {
    Flat f;
    f.params = g.params;
    f.first_index = index;
    index += g.params.size();
    for (const auto& p : g.params) f.numel += p.numel();
    f.chunk = std::max<std::int64_t>(1, (f.numel + ranks - 1) / ranks);
    f.buffer = at::zeros({f.chunk * ranks}, at::kFloat);
    // Re-seat each parameter as a view of the flat buffer: the model computes with the same
    // values, and updating a chunk of the buffer updates the parameters.
    std::int64_t offset = 0;
    for (auto& p : f.params) {
      at::Tensor view = f.buffer.narrow(0, offset, p.numel()).view(p.sizes());
      view.copy_(p);
      p.set_data(view);
      offset += p.numel();
    }
    flats_.push_back(std::move(f));
  }
  groups_ = chunks_of(flats_, buckets, comm.rank());
  inner_ = make_optimizer(groups_, options);
}

std::vector<ParamGroup> ShardedOptimizer::chunks_of(std::vector<Flat>& flats, const std::vector<ParamGroup>& groups, int rank) {
  std::vector<ParamGroup> chunks;
  for (std::size_t i = 0; i < flats.size(); ++i) {
    chunks.push_back({{flats[i].buffer.narrow(0, rank * flats[i].chunk, flats[i].chunk)}, groups[i].weight_decay});
  }
  return chunks;
}

void ShardedOptimizer::reduce_scatter_gradients() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < flats_.size(); ++i) {
    Flat& f = flats_[i];
    at::Tensor flat = at::zeros({f.chunk * comm_.size()}, at::kFloat);
    std::int64_t offset = 0;
    for (auto& p : f.params) {
      // Every rank has the same graph, so the same gradients are defined on every rank.
      if (p.grad().defined()) flat.narrow(0, offset, p.numel()).copy_(p.grad().reshape({-1}));
      p.mutable_grad() = at::Tensor();  // released: this rank keeps only its chunk's sum
      offset += p.numel();
    }
    groups_[i].params[0].mutable_grad() = comm_.reduce_scatter_sum(flat, "reduce-scattering gradients");
  }
}

void ShardedOptimizer::step(double lr) {
  ++steps_;
  inner_->step(lr);
  at::NoGradGuard no_grad;
  for (auto& f : flats_) {
    const at::Tensor mine = f.buffer.narrow(0, comm_.rank() * f.chunk, f.chunk).clone();
    comm_.all_gather(mine, f.buffer, "gathering updated parameters");
  }
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
    const Flat& f = flats_.at(i);
    at::Tensor full = at::empty({f.chunk * comm_.size()}, t.options());
    comm_.all_gather(t.reshape({-1}), full, "gathering optimizer state for a checkpoint");
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < f.params.size(); ++k) {
      const auto n = f.params[k].numel();
      out.emplace_back(prefix + "." + std::to_string(f.first_index + k), full.narrow(0, offset, n).view(f.params[k].sizes()));
      offset += n;
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
      const Flat& f = flats_[g];
      std::vector<at::Tensor> parts;
      for (std::size_t k = 0; k < f.params.size(); ++k) {
        const auto it = entries.find(f.first_index + k);
        if (it == entries.end()) break;
        if (it->second.numel() != f.params[k].numel()) {
          throw ShapeError("optimizer state: \"" + prefix + "." + std::to_string(it->first) + "\" has " +
                           std::to_string(it->second.numel()) + " elements, its parameter " + std::to_string(f.params[k].numel()));
        }
        parts.push_back(it->second.reshape({-1}).to(at::kFloat));
      }
      if (parts.empty()) continue;  // no state yet for this group (SGD before its first step)
      if (parts.size() != f.params.size()) throw FormatError("optimizer state: \"" + prefix + "\" lacks entries for some parameters");
      used += parts.size();
      if (f.chunk * comm_.size() > f.numel) parts.push_back(at::zeros({f.chunk * comm_.size() - f.numel}, at::kFloat));
      mine.emplace_back(prefix + "." + std::to_string(g), at::cat(parts).narrow(0, comm_.rank() * f.chunk, f.chunk).clone());
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
