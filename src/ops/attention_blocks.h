// How the blocked attention kernels (ops/attention.cpp, ops/attention_tiled.cpp) cut a call into
// blocks of queries, each with the range of keys the mask lets any of its queries see.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ctune::ops {

// One block: batch rows [b0, b0 + nb), queries [q0, q0 + m), keys [k0, k0 + n).
struct Block {
  std::int64_t b0, nb, q0, m, k0, n;
};

// The blocks of a call with mask broadcastable to [B, 1, Tq, Tk]: one per `queries` queries, all
// batch rows together. A block's keys run from the first key any of its queries may see to the
// last: the mask's own answer, so causal, padding, window and packed-document masks all skip
// what they rule out. A block whose queries see nothing keeps every key (the materialized
// result). Planned once per mask (and version, and shape) and reused by every layer's forward
// and backward.
std::vector<Block> plan_blocks(const at::Tensor& mask, std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t queries);

}  // namespace ctune::ops
