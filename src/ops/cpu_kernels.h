// The fused element-wise CPU kernels, as a table of plain functions over raw rows: one table per
// x86-64 level (ops/cpu_kernels.cpp is compiled three times: -march=x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2 + FMA) and the baseline), and cpu_kernels() returns the widest one this CPU
// runs. ATen picks its own kernels the same way (CPU_CAPABILITY). The tensor-level operations
// that use them (fused_softmax.h, fused_norm.h, fused_glu.h, fused_rope.h) check shapes and
// dtypes and split the rows over threads; each kernel processes rows [begin, end).
//
// Element types: fp32, bf16, fp16 (each computed in fp32) and float64 (computed in float64:
// the finite-difference tests run the same code). Index with elem_index().
#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>
#include <vector>

namespace ctune::ops {

enum Elem : int { kF32 = 0, kBF16 = 1, kF16 = 2, kF64 = 3, kElems = 4 };
// A tensor dtype's index in the tables, or -1 for a dtype the kernels do not cover.
int elem_index(c10::ScalarType dtype);

// ---- attention softmax (fused_softmax.h) ----------------------------------------------------
struct SoftmaxArgs {
  const void* scores;         // [R, n]: the table's type, or fp32 for the *_f32_scores tables
  const std::uint8_t* mask;   // [nb, m, n]: row r reads row (r / per_batch, r % m), rows mask_ld apart
  std::int64_t n, per_batch, m, mask_ld;
  double scale, softcap;
  void* probs;                // [R, n], the table's type
  void* lse;                  // [R], fp32 (float64 for float64)
  const void* d_probs;        // backward only: [R, n], the scores' type
  void* d_scores;             // backward only: [R, n], the table's type
};
using SoftmaxRowsFn = void (*)(const SoftmaxArgs&, std::int64_t begin, std::int64_t end);

// ---- gated activation (fused_glu.h) ------------------------------------------------------------
// Rows of `width` elements; every pointer has its own row stride (ld_*, in elements), so gate
// and up may be the two halves of one fused [R, 2 I] projection output.
struct GluArgs {
  int kind;  // 0: SiLU (SwiGLU), 1: tanh-approximated GELU (GeGLU)
  std::int64_t width;
  const void* gate;
  const void* up;
  std::int64_t ld_gate, ld_up;
  void* out;  // forward: act(gate) · up
  std::int64_t ld_out;
  const void* d_out;  // backward
  std::int64_t ld_d_out;
  void* d_gate;  // backward: d_out · up · act'(gate)
  void* d_up;    // backward: d_out · act(gate)
  std::int64_t ld_d_gate, ld_d_up;
};
using GluRowsFn = void (*)(const GluArgs&, std::int64_t begin, std::int64_t end);

// ---- cross entropy over the vocabulary (train/step/chunked_loss.h) ----------------------------
// Row r: z = cap(logits[r]) (cap · tanh(l / cap), or l), loss[r] = logsumexp(z) - z[target[r]];
// with grad set, grad[r] = (softmax(z) - onehot(target[r])) · cap'(z) (cap' = 1 - (z / cap)²);
// with entropy set, entropy[r] = -Σ softmax(z) log softmax(z) = logsumexp(z) - Σ softmax(z) z.
struct CrossEntropyArgs {
  const void* logits;  // [rows, vocab], row stride ld
  std::int64_t ld, vocab;
  const std::int64_t* targets;  // [rows]
  double softcap;
  double* loss;  // [rows]
  void* grad;    // [rows, vocab] (row stride vocab), the logits' type, or null
  double* entropy;  // [rows], or null
};
using CrossEntropyRowsFn = void (*)(const CrossEntropyArgs&, std::int64_t begin, std::int64_t end);

// ---- RMSNorm (fused_norm.h) ---------------------------------------------------------------------
// Row r of x: rstd = 1 / sqrt(mean(x²) + eps), y = x · rstd. Forward: out = round_out(w · round_x(y))
// (Hugging Face's weight * y.to(x.dtype)), or with `offset` out = round_x(y · w) where w already
// holds 1 + weight (Gemma). Backward from d_out: dy = d_out · w, dx = rstd (dy - y mean(dy y)),
// and, when d_weight is set, d_weight += Σ_rows d_out · round_x(y) (offset: d_out · y).
struct NormArgs {
  const void* x;   // [rows, dim], x's type
  const void* w;   // [dim], fp32 (float64 for float64): weight, or 1 + weight
  std::int64_t dim;
  double eps;
  bool offset;
  void* out;       // [rows, dim], x's type or fp32 (out_f32)
  void* rstd;      // [rows], fp32 (float64 for float64)
  const void* d_out;  // backward: [rows, dim], out's type
  void* d_x;          // backward: [rows, dim], x's type
  void* d_weight;     // backward: [dim] partial sums of this call's rows (fp32 / float64), or null
};
using NormRowsFn = void (*)(const NormArgs&, std::int64_t begin, std::int64_t end);

// ---- rotary embeddings (fused_rope.h) -----------------------------------------------------------
// x [B, T, heads, d] (element strides sb, st, sh; the last dimension contiguous) to out
// [B, heads, T, d] contiguous: for i < rot / 2, with c = cos[b, t, i], s = sin[b, t, i],
//   out_i = x_i c - x_{i + rot/2} s,   out_{i + rot/2} = x_{i + rot/2} c + x_i s,
// and the dimensions past rot copied. Backward maps d_out [B, heads, T, d] to d_x [B, T, heads, d]
// (contiguous) by the transpose: d_x_i = d_i c + d_{i + rot/2} s, d_x_{i + rot/2} = d_{i + rot/2} c - d_i s.
// Rows are (b, t) pairs. cos and sin: [B, T, rot] contiguous, fp32 (float64 for float64).
struct RopeArgs {
  const void* x;
  std::int64_t sb, st, sh;
  std::int64_t B, T, heads, d, rot;
  const void* cos;
  const void* sin;
  void* out;
  const void* d_out;  // backward
  void* d_x;          // backward
};
using RopeRowsFn = void (*)(const RopeArgs&, std::int64_t begin, std::int64_t end);

// ---- optimizer step (fused_optimizer.h) ----------------------------------------------------------
// Elements [begin, end) of flat fp32 (or float64) tensors.
struct AdamWArgs {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  double decay;       // p *= decay first (1 - lr weight_decay)
  double beta1, beta2, eps;
  double bias2_sqrt;  // sqrt(1 - beta2^t)
  double step_size;   // lr / (1 - beta1^t)
};
using AdamWFn = void (*)(const AdamWArgs&, std::int64_t begin, std::int64_t end);
// x *= scale when `apply` (unscaling fp16 gradients), and whether every element is finite.
using ScaleCheckFn = bool (*)(void* x, double scale, bool apply, std::int64_t begin, std::int64_t end);
// Σ x², accumulated in float64.
using SumSquaresFn = double (*)(const void* x, std::int64_t begin, std::int64_t end);

// ---- one row times a weight (row_product.h) ---------------------------------------------------
// y[n - begin] = Σ_k w[n, k] x[k] for rows n in [begin, end) of w [N, K] (rows contiguous, the
// table's type: fp32, or bf16 widened by a shift), x fp32 [K]: each row summed in fp32 in a fixed
// order (kDotLanes partial sums, then a fixed tree), so a row's bits do not depend on which
// thread computed it.
struct DotRowsArgs {
  const void* w;
  std::int64_t K;
  const float* x;
};
using DotRowsFn = void (*)(const DotRowsArgs&, std::int64_t begin, std::int64_t end, float* y);

struct CpuKernels {
  const char* isa;  // "x86_64_v4", "x86_64_v3", "baseline"
  SoftmaxRowsFn softmax_forward[kElems];
  SoftmaxRowsFn softmax_backward[kElems];
  // Scores and d_probs in fp32 (the tiled attention's GEMMs accumulate in fp32), probs and
  // d_scores in the indexed type: fp32 and bf16 only (null for the others).
  SoftmaxRowsFn softmax_forward_f32_scores[kElems];
  SoftmaxRowsFn softmax_backward_f32_scores[kElems];
  GluRowsFn glu_forward[kElems];
  GluRowsFn glu_backward[kElems];
  CrossEntropyRowsFn cross_entropy[kElems];
  NormRowsFn norm_forward[kElems][2];   // [x's type][out is fp32]
  NormRowsFn norm_backward[kElems][2];
  RopeRowsFn rope_forward[kElems][kElems];   // [x's type][out's type]; null where not covered
  RopeRowsFn rope_backward[kElems][kElems];  // [d_x's type][d_out's type]
  AdamWFn adamw[kElems];                     // fp32 and float64 only (null for the others)
  ScaleCheckFn scale_check[kElems];
  SumSquaresFn sum_squares[kElems];
  DotRowsFn dot_rows[kElems];  // fp32 and bf16 only (null for the others)
};

// The table for the widest instruction set this CPU supports (chosen once), or the one a
// CpuKernelsOverride put in its place.
const CpuKernels& cpu_kernels();
// Every table this CPU can run, widest first (the tests run each).
std::vector<const CpuKernels*> cpu_kernel_tables();
// Whether the fused operations run their kernels (true unless a CompositeOpsOnly is alive).
bool fused_ops_enabled();
// While alive, the element-wise fused operations (norm, gated activation, RoPE, cross entropy)
// take ATen's composite path, one rounding per operation. The llama.cpp conformance test builds
// its reference so: ggml also rounds operation by operation, and there a bf16-rounded
// activation that one ulp moved across a rounding boundary cascades through the layers
// (docs/testing.md). Not thread-safe against running operations.
class CompositeOpsOnly {
 public:
  CompositeOpsOnly();
  ~CompositeOpsOnly();
  CompositeOpsOnly(const CompositeOpsOnly&) = delete;
  CompositeOpsOnly& operator=(const CompositeOpsOnly&) = delete;

 private:
  bool previous_;
};
// While alive, cpu_kernels() returns `table` (tests; not thread-safe against running kernels).
class CpuKernelsOverride {
 public:
  explicit CpuKernelsOverride(const CpuKernels& table);
  ~CpuKernelsOverride();
  CpuKernelsOverride(const CpuKernelsOverride&) = delete;
  CpuKernelsOverride& operator=(const CpuKernelsOverride&) = delete;

 private:
  const CpuKernels* previous_;
};

// The three tables (cpu_kernels.cpp, compiled once per level).
const CpuKernels& cpu_kernels_x86_64_v4();
const CpuKernels& cpu_kernels_x86_64_v3();
const CpuKernels& cpu_kernels_baseline();

}  // namespace ctune::ops
