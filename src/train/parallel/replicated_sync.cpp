#include "train/parallel/replicated_sync.h"

#include <ATen/ATen.h>

namespace ctune::train {

void sum_over(distributed::Comm& comm, std::vector<double>& values, const char* what) {
  at::Tensor t = at::tensor(values, at::kDouble);
  comm.all_reduce_sum(t, what);
  const double* p = t.data_ptr<double>();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = p[i];
}

void ReplicatedSync::sum(std::vector<double>& values) { sum_over(comm_, values, "summing the step's counts and losses"); }

void ReplicatedSync::reduce_gradients(const std::vector<ParamGroup>& groups) {
  // The sum over ranks is one process's gradient of the global batch (each rank's loss is
  // already divided by the global target count). Ranks may differ in which gradients exist (an
  // expert no token of this rank was routed to has none): they agree first, a gradient missing
  // here joins as zeros, and one missing on every rank stays missing (the optimizer skips it,
  // as one process would).
  std::vector<at::Tensor> params;
  for (const auto& g : groups)
    for (const auto& p : g.params) params.push_back(p);
  if (params.empty()) return;
  at::Tensor present = at::zeros({static_cast<std::int64_t>(params.size())}, at::kLong);
  for (std::size_t i = 0; i < params.size(); ++i) present[static_cast<std::int64_t>(i)] = params[i].grad().defined() ? 1 : 0;
  comm_.all_reduce_max(present, "agreeing which gradients exist");
  const auto* any = present.data_ptr<std::int64_t>();
  std::vector<at::Tensor> grads;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (any[i] == 0) continue;
    if (!params[i].grad().defined()) params[i].mutable_grad() = at::zeros_like(params[i]);
    grads.push_back(params[i].grad());
  }
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

}  // namespace ctune::train
