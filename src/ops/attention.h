// The attention core, out = softmax(cap(q kᵀ · scale), masked) v, shared by the model's attention
// layer and (through it) every forward. Keys and values come once per KV head (grouped-query
// attention): query head h reads KV head h / (heads / kv_heads). The probabilities are computed
// in fp32 (float64 stays float64), whatever the compute dtype. Three kernels, one result:
//   blocked       (memory.attention: blocked, the default) never holds the [B, heads, Tq, Tk]
//                 scores: per batch row and block of kBlockQueries queries it computes scores
//                 only against the keys the mask can let that block see (causal: none after
//                 the block; packed rows: none before the first document the block touches),
//                 with each KV head shared by its query heads without copying K or V; between
//                 its matmuls, one fused sweep per row (ops/fused_softmax.h). Backward
//                 recomputes each block's probabilities from the saved q, k, v and each query's
//                 log-sum-exp (FlashAttention's backward, in ATen matmuls:
//                 docs/formats.md#blocked-attention). On the CPU in fp32 and bf16 it runs
//                 tiled (ops/attention_tiled.h: one task per batch row, KV head and block,
//                 single-threaded GEMMs whose scores stay in the core's cache); on a GPU
//                 (LibTorch >= 2.5) it is LibTorch's fused scaled_dot_product_attention.
//   materialized  the textbook graph; autograd keeps the scores and probabilities.
//   recomputed    materialized, but a custom autograd function keeps only q, k, v and recomputes
//                 the whole scores in backward (Megatron's "selective recomputation",
//                 memory.activation_checkpointing: selective with memory.attention: materialized).
// With softcap > 0 every kernel caps the scaled scores as cap · tanh(s / cap) before the mask
// (Gemma 2's attn_logit_softcapping); the blocked backward multiplies each block's score
// gradient by the cap's derivative, 1 - tanh²(s / cap). On a GPU the blocked kernel then runs
// its ATen form: LibTorch's fused attention has no soft-cap.
// Windows need no option: they are in the mask, so the blocked kernel skips the keys before a
// block's earliest window as it skips the keys after the causal edge.
// With `sinks` ([h], gpt-oss's attention sinks) each head's softmax has one more logit s_h in its
// denominator, with no value: out_i = Σ_j e^{z_ij} v_j / (e^{s_h} + Σ_j e^{z_ij}). That is the
// sinkless output times r_i = sigmoid(lse_i - s_h), lse_i the row's log-sum-exp, so every kernel
// runs as it does without sinks and scales its rows by r. The blocked backward then needs only
// the log-sum-exp with the sink in it, lse'_i = lse_i - log sigmoid(lse_i - s_h): the
// probabilities it recomputes are the sink-scaled ones and its row sum Σ_j P'_ij dP'_ij is
// dO_i · out_i, exactly the sink softmax's; and ∂L/∂s_h = -Σ_i e^{s_h - lse'_i} (dO_i · out_i)
// (docs/families.md#attention-sinks). On a GPU the blocked kernel then runs its ATen form.
// A query that may see no key at all (a padding row) gets finite, meaningless weights: uniform
// over all keys (materialized) or over its block's keys (blocked); no loss reads it.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

enum class AttentionKernel { blocked, materialized, recomputed };

// Queries per block of the blocked kernel: 128 keeps a block's fp32 scores of 9 heads against
// 2048 keys at 9 MB while its matmuls stay large enough to run near the GEMM rate.
inline constexpr std::int64_t kBlockQueries = 128;

// q: [B, h, Tq, d], k/v: [B, hkv, Tk, d] with h % hkv == 0, mask: broadcastable to
// [B, 1, Tq, Tk] (true: attend), sinks: [h] or undefined (none).
at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale, AttentionKernel kernel, double softcap = 0, const at::Tensor& sinks = {});

}  // namespace ctune::ops
