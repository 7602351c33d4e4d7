#include "model/stacked_experts.h"

#include <ATen/ATen.h>

#include "ops/compute.h"

namespace ctune::model {

StackedExpertsImpl::StackedExpertsImpl(const ModelConfig& c, at::ScalarType dtype)
    : limit(c.arch.moe.swiglu_limit), alpha(c.arch.moe.swiglu_alpha) {
  const auto E = c.arch.moe.experts, H = c.hidden_size, I = c.arch.moe.intermediate;
  const auto options = at::TensorOptions().dtype(dtype);
  gate_up_proj = register_parameter("gate_up_proj", at::empty({E, H, 2 * I}, options));
  gate_up_proj_bias = register_parameter("gate_up_proj_bias", at::empty({E, 2 * I}, options));
  down_proj = register_parameter("down_proj", at::empty({E, I, H}, options));
  down_proj_bias = register_parameter("down_proj_bias", at::empty({E, H}, options));
}

at::Tensor clamped_swiglu(const at::Tensor& gate_up, double limit, double alpha) {
  // transformers clamps the gate from above only and the up projection on both sides; clamp's
  // gradient passes where the value is inside the bounds (ends included), as torch.clamp's.
  const auto gate = gate_up.slice(-1, 0, c10::nullopt, 2).clamp_max(limit);
  const auto up = gate_up.slice(-1, 1, c10::nullopt, 2).clamp(-limit, limit);
  return (up + 1) * (gate * at::sigmoid(gate * alpha));
}

at::Tensor StackedExpertsImpl::forward(std::int64_t e, const at::Tensor& x) {
  // linear_in computes x Wᵀ for W [out, in]: the stacked [in, out] matrices enter transposed
  // (a view; the GEMM reads it as is).
  const auto gate_up = ops::linear_in(x, gate_up_proj[e].t(), gate_up_proj_bias[e], compute_dtype);
  return ops::linear_in(clamped_swiglu(gate_up, limit, alpha), down_proj[e].t(), down_proj_bias[e], compute_dtype);
}

}  // namespace ctune::model

namespace ctune::model {

Term StackedExpertsImpl::saved_per_row(const ActivationShape& s, const Term& H, const Term& I) {
  return (s.projection_input("gate_up_proj", H) + s.projection_input("down_proj", I)) / s.n + Term::num(6) * I * s.c;
}

}  // namespace ctune::model
