#include "train/parallel/full_shard.h"

#include <map>

#include <torch/csrc/autograd/custom_function.h>

namespace ctune::train {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity in forward; in backward, before the gradient flows on, `hook` acts on the part.
template <void (FullShard::*hook)(std::int64_t)>
struct BackwardHook : public torch::autograd::Function<BackwardHook<hook>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, FullShard* owner, std::int64_t scope) {
    // The FullShard outlives every graph (the model holds it).
    ctx->saved_data["owner"] = reinterpret_cast<std::int64_t>(owner);
    ctx->saved_data["scope"] = scope;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* owner = reinterpret_cast<FullShard*>(ctx->saved_data["owner"].toInt());
    (owner->*hook)(ctx->saved_data["scope"].toInt());
    return {grad[0], at::Tensor(), at::Tensor()};
  }
};
using GatherBeforeBackward = BackwardHook<&FullShard::pre_backward>;
using ReduceAfterBackward = BackwardHook<&FullShard::post_backward>;

// After a parameter's AccumulateGrad node: its gradient is whole, reduce-scatter it.
struct ReduceWhenAccumulated : public torch::autograd::FunctionPostHook {
  ReduceWhenAccumulated(FullShard& owner, FlatParam& flat, std::size_t k) : owner_(owner), flat_(flat), k_(k) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    owner_.gradient_ready(flat_, k_);
    return outputs;
  }
  FullShard& owner_;
  FlatParam& flat_;
  std::size_t k_;
};

bool records_graph(const at::Tensor& t) { return at::GradMode::is_enabled() && t.requires_grad(); }

std::vector<at::Tensor> parameters_of(const torch::nn::Module& m) { return m.parameters(/*recurse=*/true); }

}  // namespace

FullShard::FullShard(model::CausalLM& model, const std::vector<ParamGroup>& groups, distributed::Comm& comm, distributed::Comm* replicas,
                     Options options)
    : comm_(comm), replicas_(replicas), options_(options) {
  NumberingMap numbering;
  std::size_t index = 0;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const auto& p : groups[g].params) numbering[p.unsafeGetTensorImpl()] = {g, index++};
  TORCH_CHECK(numbering.size() == index, "a trainable parameter appears twice in the optimizer's groups");

  auto& decoder = *model->model;
  embedding_ = make_part(parameters_of(*decoder.embed_tokens), groups, numbering);
  for (std::size_t i = 0; i < decoder.layers->size(); ++i) blocks_.push_back(make_part(parameters_of(*decoder.layers[i]), groups, numbering));
  std::vector<at::Tensor> head = parameters_of(*decoder.norm);
  if (model->lm_head) {
    for (const auto& p : parameters_of(*model->lm_head)) head.push_back(p);
  }
  tied_ = !model->lm_head;
  head_ = make_part(head, groups, numbering);
  std::size_t sharded = 0;
  for (const auto& group : trainable()) sharded += group.flat->indices().size();
  TORCH_CHECK(sharded == index, "full_shard: ", index - sharded, " trainable parameters lie outside the embedding, blocks and head");
  // With experts, ranks route differently, so which gradients a backward produces, and in what
  // order, differs between them: reducing each as it is accumulated would pair different
  // collectives. A part's gradients are reduced together after its backward instead, once the
  // ranks agree which exist (docs/distributed.md#mixtures-of-experts).
  reduce_by_part_ = static_cast<bool>(model->model->router_record);
  if (reduce_by_part_) return;
  // A parameter's accumulator lives as long as something holds it; holding it here keeps the
  // same node (and its hook) for every step's graph.
  for (const auto& group : trainable()) {
    for (std::size_t k = 0; k < group.flat->params().size(); ++k) {
      auto accumulator = torch::autograd::impl::grad_accumulator(group.flat->params()[k]);
      accumulator->add_post_hook(std::make_unique<ReduceWhenAccumulated>(*this, *group.flat, k));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

void FullShard::gradient_ready(FlatParam& flat, std::size_t k) {
  if (sample_memory) sample_memory();  // the part whole, with this parameter's whole gradient
  flat.reduce_scatter_gradient_of(k, comm_, replicas_);
}

FullShard::Part FullShard::make_part(const std::vector<at::Tensor>& params, const std::vector<ParamGroup>& groups,
                                     const NumberingMap& numbering) {
  // One flat per optimizer group among the trainable parameters (one weight decay each), one
  // per dtype among the frozen ones. Empty tensors (a quantised base's placeholder) stay as they
  // are: the quantised weight itself is not sharded.
  std::map<std::size_t, std::pair<std::vector<at::Tensor>, std::vector<std::size_t>>> trainable;
  std::map<int, std::vector<at::Tensor>> frozen;
  for (const auto& p : params) {
    if (p.numel() == 0) continue;
    const auto it = numbering.find(p.unsafeGetTensorImpl());
    if (it != numbering.end()) {
      trainable[it->second.group].first.push_back(p);
      trainable[it->second.group].second.push_back(it->second.index);
    } else {
      TORCH_CHECK(!p.requires_grad(), "full_shard: a trainable parameter is missing from the optimizer's groups");
      frozen[static_cast<int>(p.scalar_type())].push_back(p);
    }
  }
  Part part;
  for (auto& [group, entry] : trainable) {
    part.flats.push_back(std::make_shared<FlatParam>(std::move(entry.first), std::move(entry.second), comm_, /*keep_whole=*/false, options_.offload));
    part.weight_decay.push_back(groups[group].weight_decay);
    part.trainable.push_back(true);
  }
  for (auto& [dtype, list] : frozen) {
    part.flats.push_back(std::make_shared<FlatParam>(std::move(list), std::vector<std::size_t>{}, comm_, /*keep_whole=*/false, options_.offload));
    part.weight_decay.push_back(0.0);
    part.trainable.push_back(false);
  }
  return part;
}

std::vector<FullShard::Part*> FullShard::all_parts() {
  std::vector<Part*> parts{&embedding_};
  for (auto& b : blocks_) parts.push_back(&b);
  parts.push_back(&head_);
  return parts;
}

std::vector<FlatGroup> FullShard::trainable() {
  std::vector<FlatGroup> out;
  for (const Part* part : all_parts())
    for (std::size_t i = 0; i < part->flats.size(); ++i)
      if (part->trainable[i]) out.push_back({part->flats[i], part->weight_decay[i]});
  return out;
}

std::vector<FullShard::Part*> FullShard::parts_of(std::int64_t scope) {
  if (scope == kEmbedding) return {&embedding_};
  if (scope == kHead) return tied_ ? std::vector<Part*>{&head_, &embedding_} : std::vector<Part*>{&head_};
  return {&blocks_.at(static_cast<std::size_t>(scope))};
}

void FullShard::gather(Part& part) {
  at::NoGradGuard no_grad;
  for (auto& f : part.flats) {
    if (!f->gathered()) f->start_gather(comm_, "gathering a block's parameters");
    f->finish_gather();
  }
}

void FullShard::prefetch(std::int64_t scope) {
  if (!options_.prefetch) return;
  at::NoGradGuard no_grad;
  for (Part* part : parts_of(scope))
    for (auto& f : part->flats)
      if (!f->gathered()) f->start_gather(comm_, "gathering the next block's parameters");
}

void FullShard::release(Part& part) {
  for (auto& f : part.flats) f->release();
}

at::Tensor FullShard::enter(std::int64_t scope, const at::Tensor& x) {
  // A new forward: whatever the last one left whole (an eval pass's head) is freed first.
  if (scope == kEmbedding && !whole_) release_all();
  for (Part* part : parts_of(scope)) gather(*part);
  // Forward order: the embedding, blocks 0..L-1, the head.
  const auto blocks = static_cast<std::int64_t>(blocks_.size());
  if (scope != kHead) prefetch(scope + 1 < blocks ? scope + 1 : kHead);
  if (scope == kEmbedding || !records_graph(x)) return x;
  return ReduceAfterBackward::apply(x, this, scope);
}

at::Tensor FullShard::leave(std::int64_t scope, const at::Tensor& y) {
  if (!whole_)
    for (Part* part : parts_of(scope)) release(*part);
  if (scope == kEmbedding || !records_graph(y)) return y;
  return GatherBeforeBackward::apply(y, this, scope);
}

void FullShard::pre_backward(std::int64_t scope) {
  for (Part* part : parts_of(scope)) gather(*part);
  // Backward order: blocks L-1..0 (the embedding's backward needs no weights).
  if (scope > 0) prefetch(scope - 1);
}

void FullShard::post_backward(std::int64_t scope) {
  if (reduce_by_part_ && sample_memory) sample_memory();  // the part whole, with its whole gradients
  for (Part* part : parts_of(scope)) release(*part);
  if (!reduce_by_part_) return;
  std::vector<FlatParam*> flats;
  for (Part* part : parts_of(scope))
    for (std::size_t i = 0; i < part->flats.size(); ++i)
      if (part->trainable[i]) flats.push_back(part->flats[i].get());
  reduce_agreed(flats, "agreeing which of a part's gradients exist");
}

void FullShard::reduce_agreed(const std::vector<FlatParam*>& flats, const char* what) {
  // The ranks agree which flats hold a gradient, so each issues the same reduce-scatters (one
  // missing on this rank joins as zeros).
  if (flats.empty()) return;
  at::Tensor pending = at::zeros({static_cast<std::int64_t>(flats.size())}, at::kLong);
  auto* p = pending.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < flats.size(); ++i) p[i] = flats[i]->has_gradients() ? 1 : 0;
  comm_.all_reduce_max(pending, what);
  p = pending.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < flats.size(); ++i)
    if (p[i] != 0) flats[i]->reduce_scatter_gradients(comm_, replicas_);
}

void FullShard::flush() {
  // The hooks (or, with experts, each part's backward) have reduced the gradients autograd
  // produced, except a part with no backward node (the embedding; under LoRA the first block).
  std::vector<FlatParam*> flats;
  for (const auto& group : trainable()) flats.push_back(group.flat.get());
  reduce_agreed(flats, "agreeing which gradients are left to reduce");
  release_all();
}

void FullShard::gather_all() {
  for (Part* part : all_parts()) gather(*part);
  whole_ = true;
}

void FullShard::release_all() {
  whole_ = false;
  for (Part* part : all_parts()) release(*part);
}

}  // namespace ctune::train
