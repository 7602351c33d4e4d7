// gpt-oss's experts (MoeArchitecture::clamped_stacked_experts): one module holding every expert's
// weights stacked as the checkpoint stores them, so that loading and saving are the tensors
// themselves, byte for byte, with no per-expert copies:
//   gate_up_proj [E, H, 2 I] (x · gate_up_proj[e]: the even output columns are the gate's, the
//   odd ones the up projection's), gate_up_proj_bias [E, 2 I], down_proj [E, I, H],
//   down_proj_bias [E, H].
// Expert e: gu = x · gate_up_proj[e] + b; g = min(gu[even], limit); u = clamp(gu[odd], ±limit);
// out = ((u + 1) · g · sigmoid(alpha g)) · down_proj[e] + down_bias[e] (transformers'
// GptOssExperts; docs/families.md#gpt-oss). Not Linear layers: never a LoRA target, never
// quantised (the routed block's ModuleList experts are, for the other families).
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/config.h"

namespace ctune::model {

class StackedExpertsImpl : public torch::nn::Module {
 public:
  StackedExpertsImpl(const ModelConfig& config, at::ScalarType dtype);
  // Expert e over its rows x [n, H] -> [n, H].
  at::Tensor forward(std::int64_t e, const at::Tensor& x);
  // What forward keeps for backward per routed row (model/activation_cost.h): the two matmuls'
  // inputs when the experts train, and the clamped SwiGLU's autograd graph: gate_up [2 I] (both
  // clamps read it), sigmoid(alpha g), g, u + 1 and the glu [I each].
  static Term saved_per_row(const ActivationShape& shape, const Term& hidden, const Term& intermediate);

  at::Tensor gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias;
  double limit = 7.0, alpha = 1.702;
  at::ScalarType compute_dtype = at::ScalarType::Undefined;  // as LinearImpl's
};
TORCH_MODULE(StackedExperts);

// The clamped SwiGLU on gate/up columns interleaved along the last dimension: [.., 2 I] -> [.., I].
at::Tensor clamped_swiglu(const at::Tensor& gate_up, double limit, double alpha);

}  // namespace ctune::model
