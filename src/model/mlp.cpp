#include "model/mlp.h"

#include <ATen/ATen.h>

#include "ops/fused_glu.h"

namespace ctune::model {

// The shapes are the Llama block's projections (ModelConfig::projection); the names, the family's.
MLPImpl::MLPImpl(const ModelConfig& c, at::ScalarType dtype) : intermediate(c.intermediate_size), activation(c.arch.activation) {
  const ModuleNames& names = c.arch.names;
  if (c.arch.fused_gate_up) {
    gate_up_proj = register_module("gate_up_proj", projection_linear(c, "gate_up_proj", dtype));
  } else {
    gate_proj = register_module(names.gate, projection_linear(c, "gate_proj", dtype));
    up_proj = register_module(names.up, projection_linear(c, "up_proj", dtype));
  }
  down_proj = register_module(names.down, projection_linear(c, "down_proj", dtype));
}

MLPImpl::MLPImpl(std::int64_t hidden, std::int64_t intermediate_, Activation activation_, at::ScalarType dtype,
                 const ModuleNames& names)
    : intermediate(intermediate_), activation(activation_) {
  gate_proj = register_module(names.expert_gate, Linear(hidden, intermediate, false, dtype));
  up_proj = register_module(names.expert_up, Linear(hidden, intermediate, false, dtype));
  down_proj = register_module(names.expert_down, Linear(intermediate, hidden, false, dtype));
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  // transformers' gelu_pytorch_tanh is torch's gelu(approximate="tanh").
  const auto kind = activation == Activation::gelu_tanh ? ops::GluKind::gelu_tanh : ops::GluKind::silu;
  if (gate_up_proj) {
    auto both = gate_up_proj->forward(x);
    if (!activation_override) return down_proj->forward(ops::gated_activation_fused(both, kind));
    return down_proj->forward(activation_override(both.narrow(-1, 0, intermediate)) * both.narrow(-1, intermediate, intermediate));
  }
  auto gate = gate_proj->forward(x);
  auto up = up_proj->forward(x);
  if (activation_override) return down_proj->forward(activation_override(gate) * up);
  return down_proj->forward(ops::gated_activation(gate, up, kind));
}

ActivationCost MLPImpl::saved_activations(const ModelConfig& config, const ActivationShape& s) {
  const Architecture& arch = config.arch;
  ActivationCost a;
  const ModuleNames& names = arch.names;
  const Term in = arch.fused_gate_up ? s.projection_input("gate_up_proj", s.H)
                                     : shared_projection_input(s, {names.gate.c_str(), names.up.c_str()}, s.H);
  // SwiGLU and GeGLU alike keep gate and up (ops/fused_glu.h recomputes act(gate) in backward).
  const Term glu = Term::num(2) * s.n * s.I * s.c;
  a.saved = in + glu + s.projection_input(names.down, s.I);
  a.parts = {"MLP inputs", arch.activation == Activation::gelu_tanh ? "GeGLU" : "SwiGLU", "down input"};
  return a;
}

}  // namespace ctune::model
