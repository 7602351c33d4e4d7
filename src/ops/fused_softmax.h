// The element-wise work between the blocked attention kernel's matmuls (ops/attention.cpp), one
// sweep per row of scores instead of ATen's pass per operation (scale, cap, mask, max, exp,
// sum, normalise, cast; in backward also the product with dP, its row sum, the cap's
// derivative and the casts): docs/performance.md#kernels.
//
// A block's scores are rows [R, n] (R = nb · heads · m: nb batch rows, each with its heads'
// m queries, query fastest) against n keys; row r reads mask row (r / (R / nb), r % m) of
// mask [nb, m, n] (bool, true: attend). Scores and d_probs are in the matmul dtype (fp32,
// bf16, fp16 or float64); the arithmetic is in fp32 (float64 for float64).
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

struct SoftmaxRows {
  std::int64_t batch_rows = 1;  // nb
  std::int64_t queries = 1;     // m
  double scale = 1.0;           // applied to the scores first
  double softcap = 0.0;         // > 0: z = cap · tanh(scale · s / cap) (Gemma 2)
};

// probs [R, n] ← softmax of z over the row's allowed keys, 0 elsewhere; a row with no allowed
// key gets 1/n everywhere (finite, meaningless: no loss reads it). lse [R] ← log Σ exp(z) over
// the allowed keys (+inf for a row with none), in fp32 (float64 for float64 scores).
void attention_softmax_forward(const at::Tensor& scores, const at::Tensor& mask, const SoftmaxRows& rows, at::Tensor& probs,
                               at::Tensor& lse);

// With the forward's lse and d_probs = dO vᵀ [R, n]: probs [R, n] again (for dv = Pᵀ dO) and
// d_scores [R, n] = scale · cap'(z) · P ⊙ (dP − Σ_row P ⊙ dP), 0 where masked and in rows with
// no allowed key; cap'(z) = 1 − tanh²(scale · s / cap), or 1 without a cap.
void attention_softmax_backward(const at::Tensor& scores, const at::Tensor& mask, const SoftmaxRows& rows, const at::Tensor& lse,
                                const at::Tensor& d_probs, at::Tensor& probs, at::Tensor& d_scores);

}  // namespace ctune::ops
