#include "ops/attention.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "ops/attention_blocks.h"
#include "ops/attention_tiled.h"
#include "ops/compute.h"
#include "ops/fused_softmax.h"
#include "ops/profile_regions.h"

// scaled_dot_product_attention with grouped-query K/V arrived in LibTorch 2.5.
#define CTUNE_FUSED_ATTENTION (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double lowest_finite(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return -65504.0;
    case at::kBFloat16: return -3.3895313892515355e38;
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

// Softmax (and its statistics) in fp32 at least; float64 stays float64 for the finite-difference tests.
at::ScalarType softmax_dtype(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// [B, hkv, T, d] -> [B, hkv * groups, T, d]: KV head j serves query heads j*groups .. j*groups+groups-1.
at::Tensor repeat_kv(const at::Tensor& x, std::int64_t groups) {
  if (groups == 1) return x;
  const auto B = x.size(0), hkv = x.size(1), T = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({B, hkv, groups, T, d}).reshape({B, hkv * groups, T, d});
}

// cap · tanh(s / cap), or s when cap is 0.
at::Tensor soft_cap(const at::Tensor& scores, double cap) { return cap > 0 ? tanh_any(scores / cap) * cap : scores; }

at::Tensor materialized(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                        double scale, double softcap) {
  const auto groups = q.size(1) / k.size(1);
  // Masked scores get the dtype's lowest value rather than -inf, so a fully masked row (a
  // padding query) gives finite uniform weights instead of NaN.
  auto scores = soft_cap(matmul_in(q, repeat_kv(k, groups).transpose(2, 3), q.scalar_type()) * scale, softcap);
  scores = scores.masked_fill(mask.logical_not(), at::Scalar(lowest_finite(scores.scalar_type())));
  auto probs = at::softmax(scores, -1, softmax_dtype(scores)).to(q.scalar_type());
  return matmul_in(probs, repeat_kv(v, groups), v.scalar_type());
}

// The recomputed kernel keeps only q, k, v and the mask for backward and runs `forward` without a graph.
template <typename Forward>
at::Tensor keep_inputs_and_run(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& mask, double scale, double softcap, Forward forward) {
  ctx->saved_data["scale"] = scale;
  ctx->saved_data["softcap"] = softcap;
  ctx->save_for_backward({q, k, v, mask});
  at::NoGradGuard no_grad;
  return forward(q, k, v, mask, scale, softcap);
}

struct RecomputedAttention : public torch::autograd::Function<RecomputedAttention> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, double scale,
                            double softcap) {
    return keep_inputs_and_run(ctx, q, k, v, mask, scale, softcap, materialized);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0].detach().requires_grad_(true);
    auto k = saved[1].detach().requires_grad_(true);
    auto v = saved[2].detach().requires_grad_(true);
    at::AutoGradMode enable(true);
    auto out = materialized(q, k, v, saved[3], ctx->saved_data["scale"].toDouble(), ctx->saved_data["softcap"].toDouble());
    auto grads = torch::autograd::grad({out}, {q, k, v}, {grad_out[0]});
    return {grads[0], grads[1], grads[2], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---- blocked ----------------------------------------------------------------------------------

// The tensors of one block, with query heads grouped under their KV head: q [nb, hkv, g m, d],
// k/v [nb, hkv, n, d], mask [nb, 1, 1, m, n]; scores are [nb, hkv, g m, n].
struct BlockView {
  at::Tensor q, k, v, mask;
  std::int64_t groups;
};

BlockView view_block(const Block& blk, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask) {
  const auto hkv = k.size(1), d = q.size(3), groups = q.size(1) / hkv;
  BlockView out;
  out.groups = groups;
  out.q = q.narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).reshape({blk.nb, hkv, groups * blk.m, d});
  out.k = k.narrow(0, blk.b0, blk.nb).narrow(2, blk.k0, blk.n);
  out.v = v.narrow(0, blk.b0, blk.nb).narrow(2, blk.k0, blk.n);
  out.mask = mask.expand({q.size(0), 1, q.size(2), k.size(2)})
                 .narrow(0, blk.b0, blk.nb)
                 .narrow(2, blk.q0, blk.m)
                 .narrow(3, blk.k0, blk.n)
                 .unsqueeze(1);
  return out;
}

// The block's mask rows, [nb, m, n] bool and contiguous, as the fused softmax reads them.
at::Tensor block_mask(const BlockView& x, const Block& blk) { return x.mask.reshape({blk.nb, blk.m, blk.n}).contiguous(); }

SoftmaxRows block_rows(const Block& blk, double scale, double softcap) { return {blk.nb, blk.m, scale, softcap}; }

// Per block: S = q kᵀ, P = softmax(cap(scale S)) over the allowed keys (one fused sweep per row,
// ops/fused_softmax.h), out = P v. With `lse` given it receives each query's log-sum-exp
// [B, h, Tq] for the backward.
at::Tensor blocked_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, double scale,
                           double softcap, at::Tensor* lse = nullptr) {
  const auto B = q.size(0), h = q.size(1), Tq = q.size(2), d = q.size(3);
  const auto dtype = q.scalar_type();
  auto out = at::empty({B, h, Tq, d}, q.options());
  if (lse) *lse = at::empty({B, h, Tq}, q.options().dtype(softmax_dtype(q)));
  for (const Block& blk : plan_blocks(mask, B, Tq, k.size(2), kBlockQueries)) {
    const BlockView x = view_block(blk, q, k, v, mask);
    auto scores = matmul_in(x.q, x.k.transpose(2, 3), dtype);  // [nb, hkv, g m, n]
    at::Tensor probs, block_lse;
    attention_softmax_forward(scores.view({-1, blk.n}), block_mask(x, blk), block_rows(blk, scale, softcap), probs, block_lse);
    auto o = matmul_in(probs.view(scores.sizes()), x.v, dtype);  // [nb, hkv, g m, d]
    out.narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).copy_(o.view({blk.nb, h, blk.m, d}));
    if (lse) lse->narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).copy_(block_lse.view({blk.nb, h, blk.m}));
  }
  return out;
}

struct BlockedAttention : public torch::autograd::Function<BlockedAttention> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, double scale,
                            double softcap) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    at::NoGradGuard no_grad;
    at::Tensor lse;
    const bool tiled = tiled_attention_runs(q, k);
    ctx->saved_data["tiled"] = tiled;
    auto out = tiled ? tiled_attention_forward(q, k, v, mask, scale, softcap, &lse) : blocked_forward(q, k, v, mask, scale, softcap, &lse);
    ctx->save_for_backward({q, k, v, mask, lse});
    return out;
  }

  // Per block, with P the probabilities recomputed from the saved log-sum-exp and dO the
  // output's gradient:
  //   dP = dO vᵀ, dS = P ⊙ (dP - rowsum(P ⊙ dP)), dq = scale dS k, dk += scale dSᵀ q, dv += Pᵀ dO.
  // With a soft-cap, Z = cap tanh(S / cap) feeds the softmax, so dS above is dZ and the score
  // gradient is dZ ⊙ (1 - tanh²(S / cap)). The element-wise part is one fused sweep per row.
  // dk and dv collect several blocks' shares, in fp32 (float64 for float64), rounded once.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &mask = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    if (ctx->saved_data["tiled"].toBool()) {
      auto g = tiled_attention_backward(q, k, v, mask, lse, grad_out[0], scale, softcap);
      return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const auto dtype = q.scalar_type();
    const auto acc = softmax_dtype(q);
    const auto h = q.size(1), d = q.size(3), hkv = k.size(1);
    auto grad = grad_out[0].to(dtype);
    auto dq = at::empty_like(q, at::MemoryFormat::Contiguous);
    auto dk = at::zeros(k.sizes(), k.options().dtype(acc));
    auto dv = at::zeros(v.sizes(), v.options().dtype(acc));
    for (const Block& blk : plan_blocks(mask, q.size(0), q.size(2), k.size(2), kBlockQueries)) {
      const BlockView x = view_block(blk, q, k, v, mask);
      auto scores = matmul_in(x.q, x.k.transpose(2, 3), dtype);  // [nb, hkv, g m, n]
      auto d_out = grad.narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).reshape({blk.nb, hkv, x.groups * blk.m, d});
      auto d_probs = matmul_in(d_out, x.v.transpose(2, 3), dtype);
      auto block_lse = lse.narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).contiguous();
      at::Tensor probs, d_scores;
      attention_softmax_backward(scores.view({-1, blk.n}), block_mask(x, blk), block_rows(blk, scale, softcap), block_lse.view({-1}),
                                 d_probs.view({-1, blk.n}), probs, d_scores);
      probs = probs.view(scores.sizes());
      d_scores = d_scores.view(scores.sizes());
      dq.narrow(0, blk.b0, blk.nb).narrow(2, blk.q0, blk.m).copy_(matmul_in(d_scores, x.k, dtype).view({blk.nb, h, blk.m, d}));
      dk.narrow(0, blk.b0, blk.nb).narrow(2, blk.k0, blk.n).add_(matmul_in(d_scores.transpose(2, 3), x.q, dtype));
      dv.narrow(0, blk.b0, blk.nb).narrow(2, blk.k0, blk.n).add_(matmul_in(probs.transpose(2, 3), d_out, dtype));
    }
    return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

#if CTUNE_FUSED_ATTENTION
namespace {
// The blocked kernel on an accelerator: LibTorch's fused attention (FlashAttention or
// memory-efficient attention, chosen by LibTorch), which never holds the scores either and takes
// K/V per KV head (enable_gqa). There a query that may see no key would come out NaN and poison
// the weight gradients through 0 * NaN: such a query (a padding row, which no loss reads) is let
// see its own position instead.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, double scale) {
  const auto Tq = q.size(2), Tk = k.size(2);
  const auto positions = at::TensorOptions().dtype(at::kLong).device(q.device());
  auto itself = at::arange(Tk - Tq, Tk, positions).view({1, 1, Tq, 1}) == at::arange(Tk, positions).view({1, 1, 1, Tk});
  return at::scaled_dot_product_attention(q, k, v, mask.logical_or(itself), /*dropout_p=*/0.0, /*is_causal=*/false, scale,
                                          /*enable_gqa=*/true);
}
}  // namespace
#endif

at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale, AttentionKernel kernel, double softcap) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "attention: q ", q.sizes(), " with k ", k.sizes(), " and v ", v.sizes(),
              " (need [B, h, Tq, d] and [B, hkv, Tk, d] with h a multiple of hkv)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), "attention: q, k, v in one dtype, found ",
              q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
  const bool grads = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  RECORD_USER_SCOPE(region::kAttention);
  switch (kernel) {
    case AttentionKernel::blocked:
#if CTUNE_FUSED_ATTENTION
      if (!q.device().is_cpu() && softcap == 0) return fused_attention(q, k, v, mask, scale);
#endif
      if (grads) return BlockedAttention::apply(q, k, v, mask, scale, softcap);
      return tiled_attention_runs(q, k) ? tiled_attention_forward(q, k, v, mask, scale, softcap, nullptr)
                                        : blocked_forward(q, k, v, mask, scale, softcap);
    case AttentionKernel::recomputed:
      if (grads) return RecomputedAttention::apply(q, k, v, mask, scale, softcap);
      [[fallthrough]];
    default: return materialized(q, k, v, mask, scale, softcap);
  }
}

}  // namespace ctune::ops
