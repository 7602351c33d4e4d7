// Cross entropy of rows of logits, and its gradient, in one kernel per row on a CPU (the
// kernels of ops/cpu_kernels.h): the soft-cap, the log-sum-exp and the loss, and the gradient
// softmax - onehot (times the cap's derivative) written in the logits' dtype, ready for the
// head's gradient matmuls. Arithmetic in fp32 (float64 for float64). Off the CPU: ATen's
// operations.
#pragma once

#include <ATen/ATen.h>

namespace ctune::ops {

// logits: [rows, V] (last dimension contiguous), targets: [rows] int64 in [0, V). With
// z = softcap · tanh(logits / softcap) when softcap > 0, else the logits:
//   *loss ← [rows] float64: logsumexp(z) - z[target];
//   *grad (when given) ← [rows, V] in the logits' dtype: (softmax(z) - onehot(target)) · dz/dlogits;
//   *entropy (when given) ← [rows] float64: -Σ softmax(z) log softmax(z), from the same sweep.
void cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, double softcap, at::Tensor* loss, at::Tensor* grad,
                        at::Tensor* entropy = nullptr);

}  // namespace ctune::ops
