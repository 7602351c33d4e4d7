// Activation checkpointing (recomputation) as custom autograd functions:
//   - a whole decoder block: forward under no_grad keeps only the block's input (and the RNG
//     state), backward re-runs the block with gradients on and back-propagates through it;
//   - the attention core (softmax(q kᵀ) v): keeps q, k, v instead of the [B, heads, T, T] scores
//     and probabilities, Megatron's "selective recomputation".
// The RNG state is restored before recomputing, so dropout (LoRA's) draws the same masks.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace ctune::model {

class DecoderLayerImpl;

// Which layers recompute what; parsed from memory.activation_checkpointing.
struct RecomputePolicy {
  enum class Mode { none, full, every_n, selective } mode = Mode::none;
  std::int64_t every = 1;  // every_n: layers 0, K, 2K, ... recompute

  static RecomputePolicy parse(const std::string& text);  // none | full | every_n:K | selective
  bool recompute_block(std::int64_t layer) const;
  bool recompute_attention_core() const { return mode == Mode::selective; }
};

// layer->forward(x, cos, sin, mask) with only x kept for backward.
at::Tensor checkpointed_block(DecoderLayerImpl& layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& mask);

// The attention core: out = softmax(q kᵀ · scale, masked) v, probabilities in fp32, with
// (recompute = true) or without keeping the scores for backward. q: [B, h, Tq, d], k/v: [B, h, Tk, d].
at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale, bool recompute);

}  // namespace ctune::model
