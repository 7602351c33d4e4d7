#include "ops/fused_softmax.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {

SoftmaxArgs args_of(const at::Tensor& scores, const at::Tensor& mask, const SoftmaxRows& rows) {
  TORCH_CHECK(scores.dim() == 2 && scores.is_contiguous() && scores.device().is_cpu() && elem_index(scores.scalar_type()) >= 0,
              "attention softmax: scores must be [R, n], contiguous, on the CPU, fp32/bf16/fp16/float64; found ", scores.sizes(), " ",
              scores.scalar_type());
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.is_contiguous() &&
                  mask.sizes() == at::IntArrayRef({rows.batch_rows, rows.queries, scores.size(1)}),
              "attention softmax: mask ", mask.sizes(), " (", mask.scalar_type(), ") is not [", rows.batch_rows, ", ",
              rows.queries, ", ", scores.size(1), "] bool, contiguous");
  TORCH_CHECK(scores.size(0) % rows.batch_rows == 0, "attention softmax: ", scores.size(0), " rows over ", rows.batch_rows,
              " batch rows");
  SoftmaxArgs a{};
  a.scores = scores.data_ptr();
  a.mask = reinterpret_cast<const std::uint8_t*>(mask.data_ptr<bool>());
  a.n = scores.size(1);
  a.mask_ld = a.n;
  a.per_batch = scores.size(0) / rows.batch_rows;
  a.m = rows.queries;
  a.scale = rows.scale;
  a.softcap = rows.softcap;
  return a;
}

// Rows per task: a few tens of thousands of elements each, for the thread pool.
std::int64_t grain(std::int64_t n) { return std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, n)); }

}  // namespace

void attention_softmax_forward(const at::Tensor& scores, const at::Tensor& mask, const SoftmaxRows& rows, at::Tensor& probs,
                               at::Tensor& lse) {
  SoftmaxArgs a = args_of(scores, mask, rows);
  probs = at::empty_like(scores);
  lse = at::empty({scores.size(0)}, scores.options().dtype(scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  a.probs = probs.data_ptr();
  a.lse = lse.data_ptr();
  const auto kernel = cpu_kernels().softmax_forward[elem_index(scores.scalar_type())];
  at::parallel_for(0, scores.size(0), grain(a.n), [&](std::int64_t b, std::int64_t e) { kernel(a, b, e); });
}

void attention_softmax_backward(const at::Tensor& scores, const at::Tensor& mask, const SoftmaxRows& rows, const at::Tensor& lse,
                                const at::Tensor& d_probs, at::Tensor& probs, at::Tensor& d_scores) {
  SoftmaxArgs a = args_of(scores, mask, rows);
  TORCH_CHECK(d_probs.sizes() == scores.sizes() && d_probs.scalar_type() == scores.scalar_type() && d_probs.is_contiguous(),
              "attention softmax: d_probs must be shaped and typed as the scores, contiguous");
  TORCH_CHECK(lse.is_contiguous() && lse.numel() == scores.size(0) &&
                  lse.scalar_type() == (scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
              "attention softmax: one lse per row, in the accumulation dtype");
  probs = at::empty_like(scores);
  d_scores = at::empty_like(scores);
  a.lse = const_cast<void*>(lse.data_ptr());
  a.d_probs = d_probs.data_ptr();
  a.probs = probs.data_ptr();
  a.d_scores = d_scores.data_ptr();
  const auto kernel = cpu_kernels().softmax_backward[elem_index(scores.scalar_type())];
  at::parallel_for(0, scores.size(0), grain(a.n), [&](std::int64_t b, std::int64_t e) { kernel(a, b, e); });
}

}  // namespace ctune::ops
