#include "ops/attention_blocks.h"

#include <algorithm>

namespace ctune::ops {

namespace {

// Reads the mask: per query, the first and last key any batch row lets it see.
std::vector<Block> plan_blocks_of(const at::Tensor& mask, std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t queries) {
  auto m = mask.expand({B, 1, Tq, Tk}).select(1, 0).to(at::kByte);  // [B, Tq, Tk]
  auto seen = m.amax(0);                                             // [Tq, Tk]: any row may see
  auto first = seen.argmax(-1).cpu().contiguous();                        // first 1 (0 when none)
  auto last = (Tk - 1 - seen.flip({-1}).argmax(-1)).cpu().contiguous();   // last 1 (Tk - 1 when none)
  auto any = seen.amax(-1).cpu().contiguous();
  const auto* f = first.data_ptr<std::int64_t>();
  const auto* l = last.data_ptr<std::int64_t>();
  const auto* a = any.data_ptr<std::uint8_t>();
  std::vector<Block> blocks;
  for (std::int64_t q0 = 0; q0 < Tq; q0 += queries) {
    const auto rows = std::min(queries, Tq - q0);
    std::int64_t lo = Tk, hi = -1;
    for (std::int64_t i = q0; i < q0 + rows; ++i) {
      if (!a[i]) continue;
      lo = std::min(lo, f[i]);
      hi = std::max(hi, l[i]);
    }
    if (hi < lo) lo = 0, hi = Tk - 1;
    blocks.push_back({0, B, q0, rows, lo, hi - lo + 1});
  }
  return blocks;
}

}  // namespace

// Asked once per mask: every layer's forward and backward share the model's one mask (one per
// window), and reading it costs a few passes over [B, Tq, Tk]. The masks planned last are kept
// (a reference, so one cannot be freed and another take its place) with their versions, so a
// mask changed in place is planned again.
std::vector<Block> plan_blocks(const at::Tensor& mask, std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t queries) {
  struct Planned {
    at::Tensor mask;
    std::int64_t version = 0;
    std::int64_t B = 0, Tq = 0, Tk = 0, queries = 0;
    std::vector<Block> blocks;
  };
  thread_local std::vector<Planned> recent;  // a model uses one mask per window: a few at most (and both kernels' block sizes)
  for (const Planned& p : recent) {
    if (p.mask.unsafeGetTensorImpl() == mask.unsafeGetTensorImpl() && p.version == mask._version() && p.B == B && p.Tq == Tq &&
        p.Tk == Tk && p.queries == queries) {
      return p.blocks;
    }
  }
  if (recent.size() >= 8) recent.erase(recent.begin());
  recent.push_back({mask, mask._version(), B, Tq, Tk, queries, plan_blocks_of(mask, B, Tq, Tk, queries)});
  return recent.back().blocks;
}

}  // namespace ctune::ops
