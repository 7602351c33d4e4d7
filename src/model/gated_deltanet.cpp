#include "model/gated_deltanet.h"

#include <ATen/ATen.h>

#include <cmath>

#include "ops/gated_delta.h"

namespace ctune::model {

DepthwiseConvImpl::DepthwiseConvImpl(std::int64_t channels, std::int64_t kernel, at::ScalarType dtype) {
  weight = register_parameter("weight", at::empty({channels, 1, kernel}, at::TensorOptions().dtype(dtype)));
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const ModelConfig& c, at::ScalarType dtype) : dims(c.arch.linear), eps(c.rms_norm_eps) {
  const std::int64_t H = c.hidden_size, value = dims.value_heads * dims.value_dim;
  in_proj_qkv = register_module("in_proj_qkv", Linear(H, dims.conv_channels(), false, dtype));
  in_proj_z = register_module("in_proj_z", Linear(H, value, false, dtype));
  in_proj_b = register_module("in_proj_b", Linear(H, dims.value_heads, false, dtype));
  in_proj_a = register_module("in_proj_a", Linear(H, dims.value_heads, false, dtype));
  conv1d = register_module("conv1d", DepthwiseConv(dims.conv_channels(), dims.conv_kernel, dtype));
  dt_bias = register_parameter("dt_bias", at::empty({dims.value_heads}, at::TensorOptions().dtype(dtype)));
  A_log = register_parameter("A_log", at::empty({dims.value_heads}, at::TensorOptions().dtype(dtype)));
  norm = register_module("norm", RMSNorm(dims.value_dim, c.rms_norm_eps, dtype, /*offset=*/false));
  out_proj = register_module("out_proj", Linear(value, H, false, dtype));
}

at::Tensor GatedDeltaNetImpl::forward(const at::Tensor& x_in, const at::Tensor& starts, const at::Tensor& token_mask,
                                      LayerCache* cache) {
  const auto B = x_in.size(0), T = x_in.size(1);
  // Padding enters neither the convolution nor the state: zero inputs give zero keys and
  // values, so the state a real token meets is the one it would meet without the padding.
  const at::Tensor x = token_mask.defined() ? x_in * token_mask.unsqueeze(-1).to(x_in.scalar_type()) : x_in;
  const at::Tensor qkv = in_proj_qkv->forward(x);
  const at::Tensor z = in_proj_z->forward(x);
  const at::Tensor b = in_proj_b->forward(x);
  const at::Tensor a = in_proj_a->forward(x);

  at::Tensor conv_state, state;
  if (cache) {
    TORCH_CHECK(cache->length + T <= cache->capacity, "decoding cache: ", cache->length, " positions held, ", T,
                " more do not fit its capacity of ", cache->capacity);
    conv_state = cache->conv_state;
    state = cache->recurrent_state;
  }
  const at::Tensor weight = conv1d->weight.squeeze(1);
  const at::Tensor mixed = ops::causal_conv1d_silu(qkv, weight, starts, conv_state);
  const std::int64_t kq = dims.key_heads * dims.key_dim, vd = dims.value_heads * dims.value_dim;
  const at::Tensor q = mixed.narrow(-1, 0, kq).view({B, T, dims.key_heads, dims.key_dim});
  const at::Tensor k = mixed.narrow(-1, kq, kq).view({B, T, dims.key_heads, dims.key_dim});
  const at::Tensor v = mixed.narrow(-1, 2 * kq, vd).view({B, T, dims.value_heads, dims.value_dim});
  const at::Tensor beta = at::sigmoid(b);
  // In fp32 at least (float64 stays float64): exp(A_log) of a half-precision A_log may overflow.
  const at::ScalarType wide = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor g = -at::exp(A_log.to(wide)) * at::softplus(a.to(wide) + dt_bias.to(wide));
  auto result = ops::gated_delta_rule(q, k, v, g, beta, starts, state, /*want_state=*/cache != nullptr);
  if (cache) {
    cache->conv_state = ops::conv_state_after(qkv, conv_state, dims.conv_kernel);
    cache->recurrent_state = result.state;
    cache->length += T;
  }
  // Each head's output normalised (times w), then gated by silu(z) in fp32, as Qwen3_5RMSNormGated.
  const at::Tensor o = result.out;  // [B, T, Hv, Dv]
  const at::Tensor normed = norm->forward(o);
  const at::Tensor gated = (normed.to(wide) * at::silu(z.view({B, T, dims.value_heads, dims.value_dim}).to(wide))).to(o.scalar_type());
  return out_proj->forward(gated.reshape({B, T, vd}));
}

namespace {

// The delta rule's backward recomputes its chunk quantities, transient, one layer at a time
// (ops/gated_delta.h): the per-head kernel's larger moment (its scratch per thread beside what it
// holds per token and head, or the query norm's gradient after it), else the batched form's.
Term backward_workspace(const LinearAttention& l, const ActivationShape& s) {
  const Term Hv = Term::num(l.value_heads), four = Term::num(4);
  const auto ceil = [](double x) { return Term::num(static_cast<std::int64_t>(std::ceil(x))); };
  if (!s.gated_delta_kernel)
    return four * s.n * Hv * ceil(ops::gated_delta_backward_elements(l.key_heads, l.value_heads, l.key_dim, l.value_dim));
  const auto w = ops::gated_delta_kernel_backward(l.key_heads, l.value_heads, l.key_dim, l.value_dim, s.T.value(), s.c.value() < 4);
  const Term during = four * s.n * Hv * ceil(w.during) + four * Term::min({s.threads, s.B * Hv}) * Term::num(w.scratch_per_thread);
  return Term::max({four * s.n * Hv * ceil(w.after), during});
}

}  // namespace

ActivationCost GatedDeltaNetImpl::saved_activations(const ModelConfig& config, const ActivationShape& s) {
  const LinearAttention& l = config.arch.linear;
  const Term C = Term::num(l.conv_channels()), V = Term::num(l.value_heads * l.value_dim);
  const Term Hv = Term::num(l.value_heads), four = Term::num(4);
  ActivationCost a;
  const Term inputs = shared_projection_input(s, {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"}, s.H);
  // The convolution keeps its input; the recurrence its q, k, v (the convolution's output) and
  // fp32 g and beta, and recomputes the rest in backward (ops/gated_delta.h).
  const Term conv = s.n * C * s.c;
  const Term rule = s.n * C * s.c + Term::num(2) * four * s.n * Hv;
  // The gated norm keeps its input o and z; the fp32 product keeps both factors (the normalised
  // o and silu(z)), silu its input; out_proj its input.
  const Term gate = RMSNormImpl::saved_activations(s.n * Hv, Term::num(l.value_dim), s.c) + s.n * V * s.c +
                    Term::num(2) * four * s.n * V;
  const Term o_in = s.projection_input("out_proj", V);
  a.saved = inputs + conv + rule + gate + o_in;
  a.parts = {"DeltaNet projections' input", "convolution", "q, k, v, g, beta", "gated norm", "out_proj input"};
  a.backward_workspace = backward_workspace(l, s);
  return a;
}

Term GatedDeltaNetImpl::state_bytes(const LinearAttention& l, const Term& element) {
  return Term::num(l.conv_channels() * (l.conv_kernel - 1)) * element +
         Term::num(4 * l.value_heads * l.key_dim * l.value_dim);
}

}  // namespace ctune::model
