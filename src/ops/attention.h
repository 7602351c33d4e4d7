// The attention core, out = softmax(q kᵀ · scale, masked) v, shared by the model's attention
// layer and (through it) every forward. The probabilities are computed in fp32 (float64 stays
// float64), whatever the compute dtype. With `recompute` (Megatron's "selective
// recomputation", memory.activation_checkpointing: selective) a custom autograd function keeps
// only q, k, v for backward and recomputes the [B, heads, Tq, Tk] scores and probabilities
// there, instead of saving them.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// q: [B, h, Tq, d], k/v: [B, h, Tk, d], mask: broadcastable to [B, h, Tq, Tk] (true: attend).
at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale, bool recompute);

}  // namespace ctune::ops
