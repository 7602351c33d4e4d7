#include "ops/attention.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>

#include "ops/compute.h"

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double lowest_finite(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return -65504.0;
    case at::kBFloat16: return -3.3895313892515355e38;
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

at::Tensor attention_core_plain(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                double scale) {
  // Masked scores get the dtype's lowest value rather than -inf, so a fully masked row (a
  // padding query) gives finite uniform weights instead of NaN.
  auto scores = matmul_in(q, k.transpose(2, 3), q.scalar_type()) * scale;
  scores = scores.masked_fill(mask.logical_not(), at::Scalar(lowest_finite(scores.scalar_type())));
  // Softmax in fp32 at least (float64 stays float64 for the finite-difference tests).
  auto probs = at::softmax(scores, -1, scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).to(q.scalar_type());
  return matmul_in(probs, v, v.scalar_type());
}

struct AttentionCoreFunction : public torch::autograd::Function<AttentionCoreFunction> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({q, k, v, mask});
    at::NoGradGuard no_grad;
    return attention_core_plain(q, k, v, mask, scale);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0].detach().requires_grad_(true);
    auto k = saved[1].detach().requires_grad_(true);
    auto v = saved[2].detach().requires_grad_(true);
    at::AutoGradMode enable(true);
    auto out = attention_core_plain(q, k, v, saved[3], ctx->saved_data["scale"].toDouble());
    auto grads = torch::autograd::grad({out}, {q, k, v}, {grad_out[0]});
    return {grads[0], grads[1], grads[2], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale, bool recompute) {
  if (!recompute || !at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    return attention_core_plain(q, k, v, mask, scale);
  }
  return AttentionCoreFunction::apply(q, k, v, mask, scale);
}

}  // namespace ctune::ops
