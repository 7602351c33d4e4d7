#include "model/attention.h"

#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>

#include "model/recompute.h"
#include "ops/attention.h"
#include "ops/fused_rope.h"

namespace ctune::model {

AttentionImpl::AttentionImpl(const ModelConfig& c, at::ScalarType dtype)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      scale(c.attention_scale()),
      softcap(c.arch.attn_softcap),
      output_gate(c.arch.attn_output_gate) {
  if (c.arch.fused_qkv) {
    qkv_proj = register_module("qkv_proj", projection_linear(c, "qkv_proj", dtype));
  } else {
    q_proj = register_module("q_proj", projection_linear(c, "q_proj", dtype));
    k_proj = register_module("k_proj", projection_linear(c, "k_proj", dtype));
    v_proj = register_module("v_proj", projection_linear(c, "v_proj", dtype));
  }
  o_proj = register_module("o_proj", projection_linear(c, "o_proj", dtype));
  if (c.arch.qk_norm) {
    q_norm = register_module("q_norm", config_norm(c, c.head_dim, dtype));
    k_norm = register_module("k_norm", config_norm(c, c.head_dim, dtype));
  }
  if (c.arch.attention_sinks) sinks = register_parameter("sinks", at::empty({num_heads}, at::TensorOptions().dtype(dtype)));
}

std::pair<at::Tensor, at::Tensor> LayerCache::append(const at::Tensor& k_new, const at::Tensor& v_new) {
  const auto T = k_new.size(2);
  TORCH_CHECK(length + T <= capacity, "KV cache: ", length, " positions held, ", T, " more do not fit its capacity of ", capacity);
  if (!k.defined()) {
    k = at::empty({k_new.size(0), k_new.size(1), capacity, k_new.size(3)}, k_new.options());
    v = at::empty({v_new.size(0), v_new.size(1), capacity, v_new.size(3)}, v_new.options());
  }
  k.narrow(2, length, T).copy_(k_new);
  v.narrow(2, length, T).copy_(v_new);
  length += T;
  return {k.narrow(2, 0, length), v.narrow(2, 0, length)};
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  const at::Tensor& mask, LayerCache* cache) {
  const auto B = x.size(0), T = x.size(1);
  const auto nq = num_heads * head_dim, nkv = num_kv_heads * head_dim;
  at::Tensor q, k, v, gate;
  if (qkv_proj) {  // [q; k; v] rows, split in the math only
    auto qkv = qkv_proj->forward(x);
    q = qkv.narrow(-1, 0, nq).reshape({B, T, num_heads, head_dim});
    k = qkv.narrow(-1, nq, nkv).reshape({B, T, num_kv_heads, head_dim});
    v = qkv.narrow(-1, nq + nkv, nkv).reshape({B, T, num_kv_heads, head_dim});
  } else if (output_gate) {  // per head: head_dim query rows, then head_dim gate rows
    auto qg = q_proj->forward(x).view({B, T, num_heads, 2 * head_dim});
    q = qg.narrow(-1, 0, head_dim);
    gate = qg.narrow(-1, head_dim, head_dim).reshape({B, T, nq});
    k = k_proj->forward(x).view({B, T, num_kv_heads, head_dim});
    v = v_proj->forward(x).view({B, T, num_kv_heads, head_dim});
  } else {
    q = q_proj->forward(x).view({B, T, num_heads, head_dim});
    k = k_proj->forward(x).view({B, T, num_kv_heads, head_dim});
    v = v_proj->forward(x).view({B, T, num_kv_heads, head_dim});
  }
  if (q_norm) {  // each head over head_dim, before RoPE
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  // [B, T, heads, d] -> [B, heads, T, d], rotated on the way (ops/fused_rope.h). q and k come
  // out in v's dtype (the projections' compute dtype) so the attention matmuls stay in low
  // precision under mixed precision, whatever the q/k norms returned.
  const auto dtype = v.scalar_type();
  q = use_rope ? ops::rope_heads_first(q, cos, sin, dtype) : q.transpose(1, 2).to(dtype);
  k = use_rope ? ops::rope_heads_first(k, cos, sin, dtype) : k.transpose(1, 2).to(dtype);
  // Contiguous once per layer: the blocked kernel's per-block matmuls would otherwise copy
  // their slice of the transposed view every time.
  v = v.transpose(1, 2).contiguous();
  if (cache) std::tie(k, v) = cache->append(k, v);
  // softmax(q kᵀ · scale) v over [B, nh, T, T_past + T] scores (soft-capped when the family
  // caps them); each KV head serves num_heads / num_kv_heads query heads.
  auto out = ops::attention_core(q, k, v, mask, scale, kernel, softcap, sinks);  // [B, nh, T, d]
  out = out.transpose(1, 2).reshape({B, T, num_heads * head_dim});
  if (gate.defined()) out = out * at::sigmoid(gate);
  return o_proj->forward(out);
}

ActivationCost AttentionImpl::saved_activations(const ModelConfig& config, const ActivationShape& s) {
  const Architecture& arch = config.arch;
  const Term& n = s.n;
  const Term& c = s.c;
  ActivationCost a;
  const Term qkv = arch.fused_qkv ? s.projection_input("qkv_proj", s.H) : shared_projection_input(s, {"q_proj", "k_proj", "v_proj"}, s.H);
  // Per-head q/k norms over the heads' n (nh + nkv) rows of d, of the projections' outputs.
  const Term qk_norm = arch.qk_norm ? RMSNormImpl::saved_activations(n * (s.nh + s.nkv), s.d, c) : Term();
  // Materialized attention keeps the fp32 probabilities (and their cast), a negated mask and q
  // with K and V repeated to every query head; blocked attention keeps q, the KV heads' K and V,
  // and the model's one mask (DecoderImpl::saved_outside_layers), and needs one block's scores,
  // probabilities and their gradients at a time (ops/attention.h).
  const Term TT = s.T * s.T;
  a.scores = s.blocked ? Term() : s.B * s.nh * TT * (Term::num(4) + (c.value() != 4 ? c : Term())) + s.B * TT;
  // A soft-cap keeps the scaled scores and their tanh (materialized; the blocked kernel caps
  // inside its sweep).
  const bool capped = arch.attn_softcap > 0;
  if (capped && !s.blocked) a.scores += Term::num(2) * s.B * s.nh * TT * c;
  // A block spans every batch row: in backward its scores S, dP = dO vᵀ, and the fused
  // softmax's P and dS, all in the matmul dtype (ops/fused_softmax.h), and its mask rows.
  // Tiled (ops/attention_tiled.h), one head's block per thread: S and dP in fp32, P and dS in
  // the matmul dtype; and the layer's fp32 dk and dv with their rounded copies.
  const Term four = Term::num(4), two = Term::num(2);
  if (s.blocked && s.tiled_attention) {
    a.workspace = s.threads * s.block_rows * s.T * (two * four + two * c) + two * s.B * s.nkv * s.T * s.d * (four + c);
  } else if (s.blocked) {
    a.workspace = four * s.B * s.nh * s.block_rows * s.T * c + s.B * s.block_rows * s.T;
  }
  // Blocked: q, the KV heads' k and v, and each query's fp32 log-sum-exp; materialized: q and
  // k, v repeated to every query head.
  const Term core = s.blocked ? n * (s.nh + Term::num(2) * s.nkv) * s.d * c + Term::num(4) * n * s.nh : Term::num(3) * n * s.nh * s.d * c;
  const Term o_in = s.projection_input("o_proj", s.nh * s.d);
  // The output gate's product keeps both factors: the attention output and sigmoid(gate).
  const Term gated = arch.attn_output_gate ? Term::num(2) * n * s.nh * s.d * c : Term();
  // Blocked attention with sinks keeps its output too (the sink's gradient reads dO · out);
  // materialized, the sink is one more score column (within the scores' count's rounding).
  const Term sinks = arch.attention_sinks && s.blocked ? n * s.nh * s.d * c : Term();
  a.saved = qkv + qk_norm + a.scores + core + gated + sinks + o_in;
  a.parts = {"q/k/v inputs"};
  if (arch.qk_norm) a.parts.push_back("q/k norms");
  a.parts.push_back(s.blocked ? "q, k, v (blocked attention keeps no scores)" : "scores, mask, q, k, v");
  if (arch.attn_output_gate) a.parts.push_back("output gate");
  if (arch.attention_sinks && s.blocked) a.parts.push_back("attention output (sinks)");
  a.parts.push_back("o input");
  return a;
}

at::Tensor build_attention_mask(std::int64_t batch, std::int64_t query_length, std::int64_t key_length,
                                const at::Tensor& key_mask, const at::Tensor& segment_ids, const at::Device& device,
                                std::int64_t window, const at::Tensor& prefix_ids, const at::Tensor& position_ids) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  auto q_pos = at::arange(key_length - query_length, key_length, options).view({query_length, 1});
  auto k_pos = at::arange(key_length, options).view({1, key_length});
  auto allowed = k_pos <= q_pos;
  const bool window_in_positions = window > 0 && segment_ids.defined() && position_ids.defined();
  if (window > 0 && !window_in_positions) allowed = allowed & (q_pos - k_pos < window);
  auto mask = allowed.view({1, 1, query_length, key_length}).expand({batch, 1, query_length, key_length});
  if (key_mask.defined()) mask = mask & key_mask.to(device).to(at::kBool).view({batch, 1, 1, key_length});
  if (segment_ids.defined()) {
    auto seg = segment_ids.to(device);
    auto same = seg.view({batch, 1, query_length, 1}) == seg.view({batch, 1, 1, key_length});
    if (prefix_ids.defined()) {
      auto prefix = prefix_ids.to(device).to(seg.scalar_type()).view({batch, 1, query_length, 1});
      same = same | ((prefix == seg.view({batch, 1, 1, key_length})) & (prefix != 0));
    }
    mask = mask & same & (seg != 0).view({batch, 1, 1, key_length});
    if (window_in_positions) {
      auto pos = position_ids.to(device);
      mask = mask & (pos.view({batch, 1, query_length, 1}) - pos.view({batch, 1, 1, key_length}) < window);
    }
  }
  return mask;
}

}  // namespace ctune::model
