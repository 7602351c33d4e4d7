// The optimizer step's passes over every trainable parameter, each one pass on a CPU (the
// kernels of ops/cpu_kernels.h) instead of ATen's five to eight: AdamW's update, the fp16
// gradient unscale with its finite check, and the squared gradient norm. For contiguous fp32
// (or float64) tensors on the CPU; false / nullopt otherwise, and the caller runs ATen's
// operations. AdamW follows torch.optim.AdamW's single-tensor update operation by operation.
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace ctune::ops {

struct AdamWStep {
  double lr, weight_decay, beta1, beta2, eps;
  std::int64_t step;  // 1-based, for the bias corrections
};

// Whether the step's kernels run for tensors on `device` (the CPU, with the fused operations on):
// the one answer the optimizer and the memory ledger (no update temporaries) both read.
bool fused_optimizer_on(const at::Device& device);

// param, its grad and the two moments: same shape, dtype and device. Returns false (nothing
// done) when the kernel does not cover them.
bool adamw_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const AdamWStep& s);

// x *= scale (when `apply`) in place; whether every element is finite. nullopt: not covered.
std::optional<bool> scale_and_check_finite(at::Tensor& x, double scale, bool apply);

// Σ x² in float64. nullopt: not covered.
std::optional<double> sum_of_squares(const at::Tensor& x);

}  // namespace ctune::ops
