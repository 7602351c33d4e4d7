// Activation checkpointing (recomputation): which layers recompute what, and the whole-block
// recomputation as a custom autograd function: forward under no_grad keeps only the block's
// input (and the RNG state), backward re-runs the block with gradients on and back-propagates
// through it. The RNG state is restored before recomputing, so dropout (LoRA's) draws the same
// masks. The selective mode recomputes only the attention core (ops/attention.h).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>

#include "ops/attention.h"

namespace ctune::model {

// Which layers recompute what; parsed from memory.activation_checkpointing, and how the
// attention core keeps its scores (memory.attention, ops/attention.h).
struct RecomputePolicy {
  enum class Mode { none, full, every_n, selective } mode = Mode::none;
  std::int64_t every = 1;  // every_n: layers 0, K, 2K, ... recompute
  bool blocked_attention = true;  // false: materialized scores (memory.attention: materialized)

  static RecomputePolicy parse(const std::string& text);  // none | full | every_n:K | selective
  bool recompute_block(std::int64_t layer) const;
  ops::AttentionKernel attention_kernel() const {
    if (blocked_attention) return ops::AttentionKernel::blocked;
    return mode == Mode::selective ? ops::AttentionKernel::recomputed : ops::AttentionKernel::materialized;
  }
};

// A block's forward from its input alone (what else it reads, such as the rope tables and the
// mask, it captures): any family's decoder block, as the caller writes it.
using Block = std::function<at::Tensor(const at::Tensor& x)>;

// block(x) with only x kept for backward, where it is recomputed (replaying the forward's
// random draws) and differentiated.
at::Tensor checkpointed_block(Block block, const at::Tensor& x);

}  // namespace ctune::model
