#include "ops/fused_cross_entropy.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "ops/compute.h"
#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {

bool fused_kernel_for(const at::Tensor& t) { return fused_ops_enabled() && t.device().is_cpu() && elem_index(t.scalar_type()) >= 0; }

// ATen's operations, for devices without the fused kernel.
void composite(const at::Tensor& logits, const at::Tensor& targets, double softcap, at::Tensor* loss, at::Tensor* grad,
               at::Tensor* entropy) {
  const auto acc = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto z = logits.to(acc);
  if (softcap > 0) z = tanh_any(z / softcap) * softcap;
  const auto t = targets.unsqueeze(1);
  const auto lse = at::logsumexp(z, 1);
  *loss = (lse - z.gather(1, t).squeeze(1)).to(at::kDouble);
  if (entropy) *entropy = (lse - (at::softmax(z, 1) * z).sum(1)).to(at::kDouble);
  if (!grad) return;
  auto g = at::softmax(z, 1);
  g.scatter_add_(1, t, at::full({z.size(0), 1}, -1.0, g.options()));
  if (softcap > 0) g.mul_(1 - (z / softcap).square());
  *grad = g.to(logits.scalar_type());
}

}  // namespace

void cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, double softcap, at::Tensor* loss, at::Tensor* grad,
                        at::Tensor* entropy) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.scalar_type() == at::kLong,
              "cross entropy: logits ", logits.sizes(), " with targets ", targets.sizes(), " (need [rows, V] and [rows] int64)");
  TORCH_CHECK(targets.numel() == 0 || (targets.min().item<std::int64_t>() >= 0 && targets.max().item<std::int64_t>() < logits.size(1)),
              "cross entropy: a target outside the vocabulary of ", logits.size(1));
  if (!fused_kernel_for(logits)) return composite(logits, targets, softcap, loss, grad, entropy);
  auto l = logits.stride(1) == 1 ? logits : logits.contiguous();
  auto t = targets.contiguous();
  const auto rows = l.size(0), V = l.size(1);
  *loss = at::empty({rows}, l.options().dtype(at::kDouble));
  if (grad) *grad = at::empty({rows, V}, l.options().memory_format(at::MemoryFormat::Contiguous));
  if (entropy) *entropy = at::empty({rows}, l.options().dtype(at::kDouble));
  CrossEntropyArgs a{};
  a.logits = l.data_ptr();
  a.ld = l.stride(0);
  a.vocab = V;
  a.targets = t.data_ptr<std::int64_t>();
  a.softcap = softcap;
  a.loss = loss->data_ptr<double>();
  a.grad = grad ? grad->data_ptr() : nullptr;
  a.entropy = entropy ? entropy->data_ptr<double>() : nullptr;
  const auto kernel = cpu_kernels().cross_entropy[elem_index(l.scalar_type())];
  at::parallel_for(0, rows, 1, [&](std::int64_t b, std::int64_t e) { kernel(a, b, e); });
}

}  // namespace ctune::ops
