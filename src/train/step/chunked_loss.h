// Cross-entropy over the vocabulary without ever holding all logits: positions are projected to
// the vocabulary a chunk at a time, and while a chunk's logits exist its loss and its gradient
// (softmax - onehot, one fused kernel: ops/fused_cross_entropy.h) are taken and the gradients
// of the hidden states and of the head follow from it; backward only scales them. With
// 49k-152k vocabularies the logits are otherwise the largest buffer of a small model's step,
// and projecting them again in backward would cost the head's matmul a second time.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/ATen.h>

namespace ctune::train {

// Sum over rows of -log softmax(cap(hidden · weightᵀ))[target], logits in fp32, where
// cap(z) = softcap · tanh(z / softcap) when softcap > 0 (Gemma 2's final_logit_softcapping)
// and z otherwise. hidden: [N, H], weight: [V, H] (the output head), targets: [N] int64.
// `chunk_rows` rows are projected at a time (0: default_chunk_rows).
// `compute_dtype` is the projection's matmul dtype under mixed precision (Undefined: as stored):
// the logits and the gradient are in it, the softmax and the sum in fp32 (float64 for float64).
at::Tensor chunked_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                     std::int64_t chunk_rows = 0, at::ScalarType compute_dtype = at::ScalarType::Undefined,
                                     double softcap = 0);

// Per row, log softmax(cap(hidden · weightᵀ))[target] ([N], fp32; float64 for float64): the
// per-token log-probabilities preference objectives sum per response, with the same chunking and
// dtypes as chunked_cross_entropy_sum. The upstream gradient is a vector, so nothing can be taken
// ahead: backward projects each chunk again (one more head matmul than autograd, none of the
// [N, V] logits and log-softmax autograd would keep). With `entropy` given, it receives each
// row's entropy of softmax(cap(hidden · weightᵀ)) ([N] float64, no gradient), from the same
// sweep of the forward's logits (GRPO reports it).
at::Tensor chunked_token_logps(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               std::int64_t chunk_rows = 0, at::ScalarType compute_dtype = at::ScalarType::Undefined,
                               double softcap = 0, at::Tensor* entropy = nullptr);

// On-policy distillation's loss (TRL GKD's generalized Jensen-Shannon divergence, per row summed
// over the vocabulary; docs/objectives.md#distillation), summed over rows. With s and t the
// log-softmax of the student's logits cap(hidden · weightᵀ) and of the teacher's:
//   beta 0        KL(teacher || student) = sum exp(t) (t - s)            (forward KL)
//   beta 1        KL(student || teacher) = sum exp(s) (s - t)            (reverse KL)
//   0 < beta < 1  beta KL(teacher || m) + (1 - beta) KL(student || m),  m = (1 - beta) exp(s) + beta exp(t)
// `teacher_logits(start, rows)` gives rows [start, start + rows) of the teacher's (capped) logits,
// [rows, V], without gradients: the teacher's logits exist a chunk at a time, as the student's.
// The loss is a sum, so its gradient is taken while a chunk's logits exist (closed forms:
// chunked_loss.cpp) and backward only scales it, as chunked_cross_entropy_sum's. fp32 softmax
// (float64 for float64); `compute_dtype` as chunked_cross_entropy_sum's.
using TeacherLogits = std::function<at::Tensor(std::int64_t start, std::int64_t rows)>;
at::Tensor chunked_jsd_sum(const at::Tensor& hidden, const at::Tensor& weight, const TeacherLogits& teacher_logits, double beta,
                           std::int64_t chunk_rows = 0, at::ScalarType compute_dtype = at::ScalarType::Undefined, double softcap = 0);

// Sum over rows of weights[r] times the entropy of softmax(cap(hidden · weightᵀ) / temperature),
// differentiable (GRPO's entropy bonus, objective.entropy_coef): with z the scaled logits and
// p = softmax(z), dH/dz = -p (log p + H). weights: [N] (fp32 or float64), no gradient. Chunked
// and taken in forward as chunked_cross_entropy_sum.
at::Tensor chunked_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& row_weights, double temperature,
                               std::int64_t chunk_rows = 0, at::ScalarType compute_dtype = at::ScalarType::Undefined, double softcap = 0);

// The generalized JSD of chunked_jsd_sum per row from both logits ([rows, V], any float dtype):
// `loss` [rows] and, when asked, its gradient with respect to `student` ([rows, V], fp32 or
// float64). Plain ATen; the closed forms are checked against autograd in tests.
void jsd_rows(const at::Tensor& student, const at::Tensor& teacher, double beta, at::Tensor* loss, at::Tensor* grad);

// The rows per chunk that keep one chunk's logits (`logit_bytes` each: the matmul dtype's size)
// under `budget_bytes`: 32 MiB gives a 49k vocabulary 341 bf16 rows, where the head's matmuls
// run near the GEMM rate (85 rows ran them 25-40% slower; docs/performance.md).
std::int64_t default_chunk_rows(std::int64_t vocab, std::int64_t logit_bytes, std::int64_t budget_bytes = 32ll << 20);

// Under mixed precision where the GEMM cannot write fp32 (fp16, or a build without oneDNN; bf16
// on CPU accumulates inside oneDNN's GEMM, ops/cpu_gemm.h), the head's weight gradient is a
// product in the compute dtype added to an fp32 accumulator; LibTorch's add_ of a narrower dtype
// first copies its whole addend to fp32, so the product is added in this many slices of rows (the
// copy is one slice).
inline constexpr std::int64_t kHeadGradSlices = 8;

}  // namespace ctune::train
