// The Gated DeltaNet core of Qwen3.5 / Qwen3-Next linear-attention layers on the CPU: the short
// causal convolution over the q/k/v channels, and the gated delta rule (docs/families.md, "Gated
// DeltaNet"). Both are custom autograd functions with hand-derived backwards; everything is
// computed in fp32 (float64 for float64 inputs) whatever the inputs' dtype.
//
// The delta rule runs in the chunked (WY / UT-transform) form. Per value head and chunk of C
// tokens (q̂, k̂ the normalised rows, Γ_i = exp(cs_i) with cs the cumulative log decay inside the
// chunk, D[i,j] = exp(cs_i - cs_j) for j <= i in the same document, else 0):
//   A = diag(β) (k̂ k̂ᵀ ⊙ D) strictly lower;  [W | Kc] = (I + A)⁻¹ [diag(β) v | diag(β Γ) k̂]
//   U = W - Kc S;   o = diag(Γ) q̂ S + (q̂ k̂ᵀ ⊙ D) U;   S' = Γ_last S + (diag(w) k̂)ᵀ U
// where S is the state carried in, S' the state carried out and w_j = D[C-1, j]. The unit lower
// triangular system is one batched triangular solve over every (chunk, batch row, head); the
// [C, C] and [C, D] products are batched matmuls over all of them; only S is scanned, chunk
// after chunk (two batched matmuls per chunk). Packed documents: D is zero across a document
// start, Γ_i is zero once a start lies in [chunk start, i] (the carried state is not read), and
// w_j is zero outside the chunk's last document, Γ_last zero when the chunk holds a start (the
// carried state is dropped). So nothing crosses a boundary, forward or backward, and no token
// is handled alone. Backward keeps only the inputs and recomputes the chunk quantities and the
// chunk-boundary states (the states cost two small matmuls per chunk next to the triangular
// solves and [C, C] products it needs anyway; saving them would cost [B, Hv, Dk, Dv] fp32 per
// chunk, as much memory as q, k and v together at Dk = Dv = 2 C), then scans dS backwards.
// Without gradients and with T <= kRecurrentMaxTokens (decoding) it runs the plain recurrence.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ctune::ops {

// The chunk length the model's layers run the chunked form with.
inline constexpr std::int64_t kGatedDeltaChunk = 64;

// Depthwise causal conv1d over time, then SiLU (Qwen3.5's short convolution over the q/k/v
// channels): y[b,t,c] = silu(sum_{j=0}^{K-1} w[c, K-1-j] * x[b, t-j, c]), where x[b, t-j] counts
// only when t-j is in t's document (no start in (t-j, t]); positions before 0 read `state`
// [B, C, K-1] (the previous K-1 inputs, oldest first) when it is defined, else zeros.
// x: [B, T, C] (any float dtype); weight: [C, K] (conv1d.weight [C,1,K] squeezed);
// starts: [B, T] bool, true at a document's first token, or undefined (one document per row).
// Returns [B, T, C] in x's dtype (computed in fp32). Differentiable in x and weight.
at::Tensor causal_conv1d_silu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& starts,
                              const at::Tensor& state = {});
// The conv state after x: the last K-1 inputs of each row [B, C, K-1] (oldest first), taking
// `state`'s when T < K-1. For decoding; no gradient.
at::Tensor conv_state_after(const at::Tensor& x, const at::Tensor& state, std::int64_t kernel);

struct GatedDeltaResult {
  at::Tensor out;    // [B, T, Hv, Dv] in v's dtype
  at::Tensor state;  // [B, Hv, Dk, Dv] fp32 final state when requested, else undefined
};
// The gated delta rule (Qwen3.5 / Qwen3-Next linear attention, transformers'
// torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel=True), per value head h:
//   q, k L2-normalised over Dk in fp32 (x * rsqrt(sum x^2 + 1e-6)), q scaled by Dk^-0.5;
//   S_t = exp(g_t) S_{t-1};  S_t += k_t (beta_t (v_t - S_t^T k_t))^T;  o_t = S_t^T q_t
//   (S is [Dk, Dv]), with S_0 = initial_state or 0, and S reset to 0 before every token where
//   starts is true (packed documents: nothing crosses a boundary, in forward or backward).
// q, k: [B, T, Hk, Dk]; Hv % Hk == 0 and query/key head i serves value heads i*r .. i*r+r-1
// (r = Hv / Hk; repeat_interleave, as transformers does); v: [B, T, Hv, Dv]; g: [B, T, Hv]
// log decay (<= 0); beta: [B, T, Hv] in (0,1). Everything computed and accumulated in fp32
// whatever the inputs' dtype (float32, bfloat16, float64: float64 stays float64 for tests).
// Differentiable in q, k, v, g, beta (gradients in each input's dtype; not through
// initial_state). `chunk`: the chunk length of the chunked form.
// (A start at t = 0 drops initial_state too; the returned state is float64 for float64 inputs.)
GatedDeltaResult gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                                  const at::Tensor& beta, const at::Tensor& starts, const at::Tensor& initial_state,
                                  bool want_state, std::int64_t chunk = kGatedDeltaChunk);

// On the CPU in fp32, with oneDNN's GEMM, the rule runs as one kernel per (row, value head)
// (ops/gated_delta_cpu.h); float64, other devices and builds without oneDNN run the batched
// form below. `use_gated_delta_kernel(false)` makes every call take the batched form (tests and
// benchmarks compare the two).
bool gated_delta_kernel_applies(at::Device device);
void use_gated_delta_kernel(bool on);

// What the kernel's backward holds beyond what it was given, in fp32 elements, at its two
// moments: while the kernel runs, per token and value head `during` (the unit q and k rows and
// their factors, the scaled queries, the kernel's five gradients) beside each thread's
// `scratch_per_thread` (one head's chunk quantities and carried states: ops/gated_delta_cpu.h);
// then, per token and value head, `after`, while the query's L2 norm takes its gradient (the
// same, less the scratch, plus the key-head sum and the norm's temporaries). 16-bit inputs add
// their fp32 copies of v and beta. Counted from the code and checked against the tensor pool's
// live peak (GatedDelta.BackwardWorkspaceIsWhatTheLedgerStates).
struct GatedDeltaKernelBackward {
  double during = 0, after = 0;
  std::int64_t scratch_per_thread = 0;
};
GatedDeltaKernelBackward gated_delta_kernel_backward(std::int64_t key_heads, std::int64_t value_heads, std::int64_t key_dim,
                                                     std::int64_t value_dim, std::int64_t tokens, bool sixteen_bit,
                                                     std::int64_t chunk = kGatedDeltaChunk);

// What the batched form's backward holds at its peak beyond its inputs, in accumulation-dtype
// elements per token and value head (times B T Hv, the tokens padded to whole chunks): the recomputed chunk
// quantities (q̂, k̂ and the key-head unit rows, v, [W | Kc], diag(w) k̂, the [C, C] D, Z, P, A),
// the states carried in and their gradients (three [Dk, Dv] per chunk), and the gradients of
// every product while they are combined, all alive until it returns:
//   2 (Hk / Hv) Dk + 12 Dk + 9 Dv + 11 C + 3 Dk Dv / C + 10.
// Counted from the code and checked against the tensor pool's live peak
// (GatedDelta.BackwardWorkspaceIsWhatTheLedgerStates: within 3% on four shapes).
double gated_delta_backward_elements(std::int64_t key_heads, std::int64_t value_heads, std::int64_t key_dim, std::int64_t value_dim,
                                     std::int64_t chunk = kGatedDeltaChunk);

// At most this many tokens, and no gradient wanted, take the per-token recurrence (decoding).
inline constexpr std::int64_t kRecurrentMaxTokens = 8;

}  // namespace ctune::ops
