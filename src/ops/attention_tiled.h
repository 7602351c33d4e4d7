// The blocked attention kernel's CPU form for fp32 and bf16 (ops/attention.h): the same blocks
// (ops/attention_blocks.h) and the same fused softmax sweeps (ops/fused_softmax.h), but every
// (batch row, KV head, block) is one task on ATen's thread pool that runs single-threaded GEMMs
// (ops/cpu_gemm.h) one query head at a time, so a head's block of scores ([queries, keys] in
// fp32) stays in the core's cache from its GEMM through the sweep to the next GEMM. The ATen
// form runs one batched matmul per block over every row and head, and its sweeps read scores
// that have left the cache (docs/performance.md#the-kernels).
//
// Numerics: the scores and dP = dO vᵀ are the GEMMs' fp32 accumulators, not rounded to the
// compute dtype first as ATen's bf16 matmuls round them; dK and dV accumulate every block's
// share in fp32 inside the GEMM and are rounded once. Each pair's dK and dV belong to one task,
// so the sums run in one fixed order: results do not depend on the thread count's schedule.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// Queries per tile: 64 keeps one head's scores against 2048 keys at 512 KB of fp32 and cuts the
// causal blocks' work to 56% of the full square at T = 512 (128: 62.5%).
inline constexpr std::int64_t kTileQueries = 64;

// Whether the tiled kernel takes a call on `device` in `dtype` with `pairs` (batch row, KV head)
// pairs on `threads` threads: the CPU, fp32 or bf16, ctune built with oneDNN, and at least one
// pair per thread (the backward gives each pair to one task). The memory ledger asks the same.
bool tiled_attention_applies(at::Device device, at::ScalarType dtype, std::int64_t pairs, std::int64_t threads);

// tiled_attention_applies for q [B, h, Tq, d] and k [B, hkv, Tk, d] on ATen's thread count.
bool tiled_attention_runs(const at::Tensor& q, const at::Tensor& k);

// out [B, h, Tq, d]; with `lse` given it receives each query's log-sum-exp [B, h, Tq] (fp32).
at::Tensor tiled_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                   double scale, double softcap, at::Tensor* lse);

struct AttentionGrads {
  at::Tensor dq, dk, dv;
};

// The gradients from the forward's lse and the output's gradient.
AttentionGrads tiled_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                        const at::Tensor& lse, const at::Tensor& grad_out, double scale, double softcap);

// The GEMM FLOPs (2 m n k each) the tiled kernel has run in this process. Its tiles are no ATen
// operators, so the step profiler (logging.profile), which counts FLOPs from operators' shapes,
// adds this counter's growth over a step to its attention category.
double tiled_attention_gemm_flops();

}  // namespace ctune::ops
