#include "train/step/chunked_loss.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "ops/compute.h"

namespace ctune::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Logits are accumulated in fp32 at least (float64 inputs stay float64, which the
// finite-difference test relies on).
at::ScalarType accumulate_type(const at::Tensor& hidden) {
  return hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// One chunk's logits in the accumulation dtype, soft-capped when `cap` > 0.
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& weight, at::ScalarType compute, at::ScalarType acc, double cap) {
  auto logits = ops::matmul_in(h, weight.t(), compute).to(acc);
  if (cap > 0) logits = at::tanh(logits.div_(cap)).mul_(cap);
  return logits;
}

struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor hidden, at::Tensor weight, at::Tensor targets,
                            std::int64_t chunk, std::int64_t compute, double softcap) {
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["compute"] = compute;
    ctx->saved_data["softcap"] = softcap;
    const auto cd = static_cast<at::ScalarType>(compute);
    at::NoGradGuard no_grad;
    const auto acc = accumulate_type(hidden);
    auto total = at::zeros({}, hidden.options().dtype(acc));
    const auto n = hidden.size(0);
    for (std::int64_t start = 0; start < n; start += chunk) {
      const auto rows = std::min(chunk, n - start);
      auto logits = chunk_logits(hidden.narrow(0, start, rows), weight, cd, acc, softcap);  // [rows, V]
      auto target_logit = logits.gather(1, targets.narrow(0, start, rows).unsqueeze(1)).squeeze(1);
      total += (at::logsumexp(logits, 1) - target_logit).sum();
    }
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto cd = static_cast<at::ScalarType>(ctx->saved_data["compute"].toInt());
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const auto acc = accumulate_type(hidden);
    const auto scale = grad_out[0].to(acc);
    const bool need_hidden = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    at::Tensor grad_hidden = need_hidden ? at::empty_like(hidden) : at::Tensor();
    at::Tensor grad_weight = need_weight ? at::zeros(weight.sizes(), weight.options().dtype(acc)) : at::Tensor();
    const auto n = hidden.size(0);
    for (std::int64_t start = 0; start < n; start += chunk) {
      const auto rows = std::min(chunk, n - start);
      auto h = hidden.narrow(0, start, rows);
      auto logits = chunk_logits(h, weight, cd, acc, softcap);
      // d loss / d logits = softmax(logits) - onehot(target), times the incoming gradient; with
      // a cap, times its derivative 1 - (z / cap)² on the way to the uncapped logits.
      auto g = at::softmax(logits, 1);
      auto t = targets.narrow(0, start, rows).unsqueeze(1);
      g.scatter_add_(1, t, at::full({rows, 1}, -1.0, g.options()));
      g.mul_(scale);
      if (softcap > 0) g.mul_(1 - logits.div_(softcap).square_());
      // Under mixed precision both gradient matmuls run in the compute dtype, as autocast's
      // backward would; without it, d hidden in the weight's dtype and d weight in fp32.
      const auto gd = cd != at::ScalarType::Undefined ? cd : weight.scalar_type();
      if (need_hidden) grad_hidden.narrow(0, start, rows).copy_(ops::matmul_in(g.to(gd), weight, gd));
      if (need_weight) grad_weight.add_(ops::matmul_in(g.t(), h, cd != at::ScalarType::Undefined ? cd : acc).to(acc));
    }
    if (need_weight) grad_weight = grad_weight.to(weight.scalar_type());
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::int64_t default_chunk_rows(std::int64_t vocab, std::int64_t budget_bytes) {
  return std::max<std::int64_t>(16, budget_bytes / (4 * std::max<std::int64_t>(1, vocab)));
}

at::Tensor chunked_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                     std::int64_t chunk_rows, at::ScalarType compute_dtype, double softcap) {
  const auto chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(weight.size(0));
  return ChunkedCrossEntropy::apply(hidden, weight, targets, chunk, static_cast<std::int64_t>(compute_dtype), softcap);
}

}  // namespace ctune::train
