// The gated MLP of a decoder layer, and of each expert of a sparse one (model/moe.h).
#pragma once

#include <cstdint>
#include <functional>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/config.h"
#include "model/layers.h"

namespace ctune::model {

// down(act(gate(x)) * up(x)): SwiGLU, or GeGLU with tanh GELU (Architecture::activation).
class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& config, at::ScalarType dtype);
  // An expert of a sparse block (model/moe.h): no biases, `intermediate` wide, its projections
  // under the family's expert names (ModuleNames::expert_gate, expert_up, expert_down).
  MLPImpl(std::int64_t hidden, std::int64_t intermediate, Activation activation, at::ScalarType dtype, const ModuleNames& names);
  at::Tensor forward(const at::Tensor& x);
  // What forward keeps for backward (model/activation_cost.h).
  static ActivationCost saved_activations(const ModelConfig& config, const ActivationShape& shape);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Linear gate_up_proj{nullptr};  // Architecture::fused_gate_up: [gate; up] rows, instead of the two
  std::int64_t intermediate = 0;
  Activation activation;
  // When set, replaces act(): the llama.cpp conformance test puts ggml's GELU there (its f32
  // GELU reads an f16 table), as LinearAdapter lets it put ggml's matmul rounding.
  std::function<at::Tensor(const at::Tensor&)> activation_override;
};
TORCH_MODULE(MLP);

}  // namespace ctune::model
