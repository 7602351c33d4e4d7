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
                        double scale, double softcap, const at::Tensor& sinks = {}) {
  const auto groups = q.size(1) / k.size(1);
  // Masked scores get the dtype's lowest value rather than -inf, so a fully masked row (a
  // padding query) gives finite uniform weights instead of NaN.
  auto scores = soft_cap(matmul_in(q, repeat_kv(k, groups).transpose(2, 3), q.scalar_type()) * scale, softcap);
  scores = scores.masked_fill(mask.logical_not(), at::Scalar(lowest_finite(scores.scalar_type())));
  at::Tensor probs;
  if (sinks.defined()) {
    // The sink: one more logit per head in every row's softmax, dropped after it (it has no value).
    const auto acc = softmax_dtype(scores);
    const auto Tk = scores.size(3);
    auto column = sinks.to(acc).view({1, -1, 1, 1}).expand({scores.size(0), scores.size(1), scores.size(2), 1});
    probs = at::softmax(at::cat({scores.to(acc), column}, -1), -1).narrow(-1, 0, Tk).to(q.scalar_type());
  } else {
    probs = at::softmax(scores, -1, softmax_dtype(scores)).to(q.scalar_type());
  }
  return matmul_in(probs, repeat_kv(v, groups), v.scalar_type());
}

// Sinks travel through the autograd functions as an optional input: absent, it is no input at all.
using OptionalSinks = c10::optional<at::Tensor>;

OptionalSinks optional_sinks(const at::Tensor& sinks) { return sinks.defined() ? OptionalSinks(sinks) : c10::nullopt; }

// The recomputed kernel keeps only q, k, v, the mask (and the sinks) for backward and runs the
// materialized kernel without a graph.
struct RecomputedAttention : public torch::autograd::Function<RecomputedAttention> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, OptionalSinks sinks,
                            double scale, double softcap) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    const at::Tensor s = sinks.value_or(at::Tensor());
    ctx->save_for_backward({q, k, v, mask, s});
    at::NoGradGuard no_grad;
    return materialized(q, k, v, mask, scale, softcap, s);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (int i : {0, 1, 2, 4})
      if (saved[i].defined()) inputs.push_back(saved[i].detach().requires_grad_(true));
    const at::Tensor sinks = saved[4].defined() ? inputs[3] : at::Tensor();
    at::AutoGradMode enable(true);
    auto out = materialized(inputs[0], inputs[1], inputs[2], saved[3], ctx->saved_data["scale"].toDouble(),
                            ctx->saved_data["softcap"].toDouble(), sinks);
    auto grads = torch::autograd::grad({out}, inputs, {grad_out[0]});
    return {grads[0], grads[1], grads[2], at::Tensor(), sinks.defined() ? grads[3] : at::Tensor(), at::Tensor(), at::Tensor()};
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

// The blocked kernel's gradients from the saved log-sum-exp. Per block, with P the
// probabilities recomputed from it and dO the output's gradient:
//   dP = dO vᵀ, dS = P ⊙ (dP - rowsum(P ⊙ dP)), dq = scale dS k, dk += scale dSᵀ q, dv += Pᵀ dO.
// With a soft-cap, Z = cap tanh(S / cap) feeds the softmax, so dS above is dZ and the score
// gradient is dZ ⊙ (1 - tanh²(S / cap)). The element-wise part is one fused sweep per row.
// dk and dv collect several blocks' shares, in fp32 (float64 for float64), rounded once.
AttentionGrads blocked_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                const at::Tensor& lse, const at::Tensor& grad_out, double scale, double softcap) {
  const auto dtype = q.scalar_type();
  const auto acc = softmax_dtype(q);
  const auto h = q.size(1), d = q.size(3), hkv = k.size(1);
  auto grad = grad_out.to(dtype);
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
  return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

// The blocked kernel's forward, tiled where it applies; `lse` as blocked_forward's.
at::Tensor blocked_or_tiled_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                    double scale, double softcap, at::Tensor* lse) {
  return tiled_attention_runs(q, k) ? tiled_attention_forward(q, k, v, mask, scale, softcap, lse)
                                    : blocked_forward(q, k, v, mask, scale, softcap, lse);
}

// The sinkless output and log-sum-exp turned into the sink softmax's (ops/attention.h): each
// row scaled by r = sigmoid(lse - s), and lse' = lse - log sigmoid(lse - s), the log-sum-exp
// with the sink's term in it. A row with no allowed key (lse +inf) keeps r = 1, lse' = +inf.
void apply_sinks(at::Tensor& out, at::Tensor& lse, const at::Tensor& sinks) {
  const auto shifted = lse - sinks.to(lse.scalar_type()).view({1, -1, 1});
  out = (out * at::sigmoid(shifted).unsqueeze(-1)).to(out.scalar_type());
  lse = lse - at::log_sigmoid(shifted);
}

// ∂L/∂s_h = -Σ over rows of head h of e^{s_h - lse'} (dO · out): the sink's probability times
// the row sum the softmax's backward subtracts (its own dP is 0: it has no value).
at::Tensor sink_gradient(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& lse, const at::Tensor& sinks) {
  const auto acc = lse.scalar_type();
  const auto dot = (grad_out.to(acc) * out.to(acc)).sum(-1);                   // [B, h, Tq]
  const auto sink_prob = at::exp(sinks.to(acc).view({1, -1, 1}) - lse);        // [B, h, Tq]
  return (-(sink_prob * dot)).sum(at::IntArrayRef{0, 2}).to(sinks.scalar_type());
}

struct BlockedAttention : public torch::autograd::Function<BlockedAttention> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, OptionalSinks sinks,
                            double scale, double softcap) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    at::NoGradGuard no_grad;
    at::Tensor lse;
    const bool tiled = tiled_attention_runs(q, k);
    ctx->saved_data["tiled"] = tiled;
    auto out = blocked_or_tiled_forward(q, k, v, mask, scale, softcap, &lse);
    const at::Tensor s = sinks.value_or(at::Tensor());
    if (s.defined()) apply_sinks(out, lse, s);
    // With sinks the output is kept too: the sink's gradient needs dO · out per row.
    ctx->save_for_backward({q, k, v, mask, lse, s.defined() ? out : at::Tensor(), s});
    return out;
  }

  // blocked_backward (or the tiled kernel's) from the saved log-sum-exp; with sinks that is
  // lse', so the recomputed probabilities are the sink softmax's and so are dq, dk, dv.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &mask = saved[3], &lse = saved[4], &out = saved[5], &sinks = saved[6];
    const double scale = ctx->saved_data["scale"].toDouble();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const auto g = ctx->saved_data["tiled"].toBool() ? tiled_attention_backward(q, k, v, mask, lse, grad_out[0], scale, softcap)
                                                     : blocked_backward(q, k, v, mask, lse, grad_out[0], scale, softcap);
    const at::Tensor d_sinks = sinks.defined() ? sink_gradient(out, grad_out[0], lse, sinks) : at::Tensor();
    return {g.dq, g.dk, g.dv, at::Tensor(), d_sinks, at::Tensor(), at::Tensor()};
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
                          double scale, AttentionKernel kernel, double softcap, const at::Tensor& sinks) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "attention: q ", q.sizes(), " with k ", k.sizes(), " and v ", v.sizes(),
              " (need [B, h, Tq, d] and [B, hkv, Tk, d] with h a multiple of hkv)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), "attention: q, k, v in one dtype, found ",
              q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(!sinks.defined() || (sinks.dim() == 1 && sinks.size(0) == q.size(1)), "attention: sinks ", sinks.sizes(),
              " (need one per query head: [", q.size(1), "])");
  const bool grads = at::GradMode::is_enabled() &&
                     (q.requires_grad() || k.requires_grad() || v.requires_grad() || (sinks.defined() && sinks.requires_grad()));
  RECORD_USER_SCOPE(region::kAttention);
  switch (kernel) {
    case AttentionKernel::blocked: {
#if CTUNE_FUSED_ATTENTION
      if (!q.device().is_cpu() && softcap == 0 && !sinks.defined()) return fused_attention(q, k, v, mask, scale);
#endif
      if (grads) return BlockedAttention::apply(q, k, v, mask, optional_sinks(sinks), scale, softcap);
      at::Tensor lse;
      auto out = blocked_or_tiled_forward(q, k, v, mask, scale, softcap, sinks.defined() ? &lse : nullptr);
      if (sinks.defined()) apply_sinks(out, lse, sinks);
      return out;
    }
    case AttentionKernel::recomputed:
      if (grads) return RecomputedAttention::apply(q, k, v, mask, optional_sinks(sinks), scale, softcap);
      [[fallthrough]];
    default: return materialized(q, k, v, mask, scale, softcap, sinks);
  }
}

}  // namespace ctune::ops
