// Activation checkpointing (recomputation): which layers recompute what, and the whole-block
// recomputation as a custom autograd function: forward under no_grad keeps only the block's
// input (and the RNG state), backward re-runs the block with gradients on and back-propagates
// through it. The RNG state is restored before recomputing, so dropout (LoRA's) draws the same
// masks. The selective mode recomputes only the attention core (ops/attention.h).
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

}  // namespace ctune::model
