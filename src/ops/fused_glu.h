// The gated activation of the MLP, act(gate) · up (SwiGLU with SiLU, GeGLU with
// tanh-approximated GELU), forward and backward each one pass over the rows on a CPU (the
// kernels of ops/cpu_kernels.h) instead of ATen's three forward and five backward passes. The
// arithmetic is in fp32 (float64 for float64) and the result rounded once to the inputs'
// dtype; backward saves only gate and up (not act(gate)). Off the CPU: ATen's operations.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

enum class GluKind { silu, gelu_tanh };

// gate, up: [.., I], one dtype and shape, last dimension contiguous. -> [.., I].
at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, GluKind kind);

// both: [.., 2 I], gate its first half and up its second (a fused gate_up projection's output);
// its gradient comes back as one [.., 2 I] tensor. -> [.., I].
at::Tensor gated_activation_fused(const at::Tensor& both, GluKind kind);

}  // namespace ctune::ops
