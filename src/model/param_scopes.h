// The seam where a sharded run gathers and frees parameters (distributed.strategy full_shard,
// train/parallel/full_shard.h): the decoder calls enter() before a part that owns parameters computes
// and leave() after it, passing the activation that flows through, which the implementation may
// wrap in autograd nodes that act again in backward. The parts, in forward order: the embedding
// (kEmbedding), each block (its index), and the final norm with the output head (kHead: from
// the final norm through the loss; it has no leave()). This base class does nothing.
// A forward without gradients (a preference objective's reference) has no backward to free the
// head after it: its caller calls release_all().
#pragma once

#include <cstdint>

#include <ATen/Tensor.h>

namespace ctune::model {

class ParamScopes {
 public:
  static constexpr std::int64_t kEmbedding = -1;
  static constexpr std::int64_t kHead = -2;

  virtual ~ParamScopes() = default;
  virtual at::Tensor enter(std::int64_t /*scope*/, const at::Tensor& x) { return x; }
  virtual at::Tensor leave(std::int64_t /*scope*/, const at::Tensor& y) { return y; }
  // Frees every part still whole.
  virtual void release_all() {}
};

}  // namespace ctune::model
