#include "train/step/chunked_loss.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "ops/compute.h"
#include "ops/cpu_gemm.h"
#include "ops/fused_cross_entropy.h"

namespace ctune::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Gradients are accumulated in fp32 at least (float64 inputs stay float64, which the
// finite-difference test relies on).
at::ScalarType accumulate_type(const at::Tensor& hidden) {
  return hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// grad_weight (the accumulator, fp32 or wider) += grad^T h, the product in the matmul dtype `md`:
// inside the GEMM where it can (no [V, H] product beside it, no separate add pass): in the
// accumulator's own dtype, or bf16 operands accumulated in fp32 by oneDNN (ops/cpu_gemm.h);
// otherwise a narrower product is added a slice of rows at a time (kHeadGradSlices).
void add_weight_gradient(at::Tensor& grad_weight, const at::Tensor& grad, const at::Tensor& h, at::ScalarType md) {
  if (md == grad_weight.scalar_type() && grad.scalar_type() == md && h.scalar_type() == md) {
    grad_weight.addmm_(grad.t(), h);
    return;
  }
  if (md == at::kBFloat16 && ops::cpu_gemm::weight_grad_fp32(grad_weight, grad.to(md), h.to(md), /*accumulate=*/true)) return;
  const auto part = ops::matmul_in(grad.t(), h, md);
  if (part.scalar_type() == grad_weight.scalar_type()) {
    grad_weight.add_(part);
    return;
  }
  const auto rows = part.size(0), slice = (rows + kHeadGradSlices - 1) / kHeadGradSlices;
  for (std::int64_t start = 0; start < rows; start += slice) {
    const auto n = std::min(slice, rows - start);
    grad_weight.narrow(0, start, n).add_(part.narrow(0, start, n));
  }
}

// The weight as the chunks' matmuls take it: cast to the compute dtype once for all chunks.
at::Tensor weight_in(const at::Tensor& weight, at::ScalarType cd) {
  return cd != at::ScalarType::Undefined ? weight.to(cd) : weight;
}

// A summed loss whose gradients forward takes (ChunkedCrossEntropy, ChunkedJsd): they wait in
// `ctx` for the one number backward brings, the weight's to return in its own dtype.
void keep_gradients(AutogradContext* ctx, const at::Tensor& grad_hidden, const at::Tensor& grad_weight, at::ScalarType weight_dtype) {
  ctx->saved_data["grad_hidden"] = grad_hidden;
  ctx->saved_data["grad_weight"] = grad_weight;
  ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight_dtype);
}

// Their backward, run once: the gradients kept are scaled in place; `inputs`: the function's
// forward arguments (hidden and weight first, the rest without gradients).
variable_list scaled_gradients(AutogradContext* ctx, const variable_list& grad_out, std::size_t inputs) {
  auto grad_hidden = ctx->saved_data["grad_hidden"].toTensor();
  auto grad_weight = ctx->saved_data["grad_weight"].toTensor();
  const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
  ctx->saved_data.clear();
  const auto scale = grad_out[0].to(at::kDouble).item<double>();
  if (grad_hidden.defined()) grad_hidden.mul_(scale);
  if (grad_weight.defined()) grad_weight = grad_weight.mul_(scale).to(weight_dtype);
  variable_list out(inputs);
  out[0] = grad_hidden, out[1] = grad_weight;
  return out;
}

// The forward of a summed loss over the head's logits, a chunk of rows at a time: `chunk_loss(start,
// rows, logits, grad)` gives a chunk's loss sum from its logits (the matmul's dtype) and, when
// gradients are needed, sets `grad` to its gradient with respect to them; the gradients of the
// hidden states and of the head follow while the chunk exists, and wait in `ctx` for backward
// (keep_gradients). The gradients' matmuls run in the compute dtype under mixed precision, as
// autocast's backward would; without it, d hidden in the weight's dtype and d weight in fp32.
template <typename ChunkLoss>
at::Tensor sum_taking_gradients(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight, std::int64_t chunk,
                                at::ScalarType cd, bool need_hidden, bool need_weight, ChunkLoss chunk_loss) {
  at::NoGradGuard no_grad;
  const auto acc = accumulate_type(hidden);
  const auto gd = cd != at::ScalarType::Undefined ? cd : weight.scalar_type();
  at::Tensor grad_hidden = need_hidden ? at::empty(hidden.sizes(), hidden.options()) : at::Tensor();
  at::Tensor grad_weight = need_weight ? at::zeros(weight.sizes(), weight.options().dtype(acc)) : at::Tensor();
  double total = 0;
  const auto n = hidden.size(0);
  const auto w = weight_in(weight, cd);
  for (std::int64_t start = 0; start < n; start += chunk) {
    const auto rows = std::min(chunk, n - start);
    const auto h = hidden.narrow(0, start, rows);
    at::Tensor grad;
    total += chunk_loss(start, rows, ops::matmul_in(h, w.t(), cd), grad);  // [rows, V] logits, the matmul's dtype
    if (!grad.defined()) continue;
    if (need_hidden) grad_hidden.narrow(0, start, rows).copy_(ops::matmul_in(grad.to(gd), w, gd));
    if (need_weight) add_weight_gradient(grad_weight, grad, h, cd != at::ScalarType::Undefined ? cd : acc);
  }
  keep_gradients(ctx, grad_hidden, grad_weight, weight.scalar_type());
  return at::scalar_tensor(total, hidden.options().dtype(acc));
}

// The loss is a sum, so its gradient is known in forward up to the one number backward brings
// (1 / target tokens, times the loss scale): each chunk's gradient is taken while its logits
// exist, and backward only scales it. The head's projection runs once per chunk instead of
// twice (forward, then again in backward), and no logits outlive their chunk.
struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  // need_hidden / need_weight: whether backward will ask for each gradient (decided by the
  // caller, where the grad mode is known).
  static at::Tensor forward(AutogradContext* ctx, at::Tensor hidden, at::Tensor weight, at::Tensor targets, std::int64_t chunk,
                            std::int64_t compute, double softcap, bool need_hidden, bool need_weight) {
    const bool grads = need_hidden || need_weight;
    return sum_taking_gradients(ctx, hidden, weight, chunk, static_cast<at::ScalarType>(compute), need_hidden, need_weight,
                                [&](std::int64_t start, std::int64_t rows, const at::Tensor& logits, at::Tensor& grad) {
                                  at::Tensor loss;
                                  ops::cross_entropy_rows(logits, targets.narrow(0, start, rows), softcap, &loss, grads ? &grad : nullptr);
                                  return loss.sum().item<double>();
                                });
  }

  // The training loss's backward runs once: the gradients taken in forward are scaled in place.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) { return scaled_gradients(ctx, grad_out, 8); }
};

// Per-row log-probabilities; backward recomputes each chunk's logits (see chunked_loss.h).
struct ChunkedTokenLogps : public torch::autograd::Function<ChunkedTokenLogps> {
  // entropy: [N] float64 to fill, or empty (an output in all but name: written here, never
  // differentiated; autograd takes no undefined tensor among a function's inputs).
  static at::Tensor forward(AutogradContext* ctx, at::Tensor hidden, at::Tensor weight, at::Tensor targets, std::int64_t chunk,
                            std::int64_t compute, double softcap, at::Tensor entropy) {
    const auto cd = static_cast<at::ScalarType>(compute);
    at::NoGradGuard no_grad;
    const auto acc = accumulate_type(hidden);
    auto out = at::empty({hidden.size(0)}, hidden.options().dtype(acc));
    const auto w = weight_in(weight, cd);
    for (std::int64_t start = 0; start < hidden.size(0); start += chunk) {
      const auto rows = std::min(chunk, hidden.size(0) - start);
      at::Tensor loss, chunk_entropy;
      ops::cross_entropy_rows(ops::matmul_in(hidden.narrow(0, start, rows), w.t(), cd), targets.narrow(0, start, rows), softcap,
                              &loss, nullptr, entropy.numel() > 0 ? &chunk_entropy : nullptr);
      out.narrow(0, start, rows).copy_(loss.neg());
      if (entropy.numel() > 0) entropy.narrow(0, start, rows).copy_(chunk_entropy);
    }
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["compute"] = compute;
    ctx->saved_data["softcap"] = softcap;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &weight = saved[1], &targets = saved[2];
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto cd = static_cast<at::ScalarType>(ctx->saved_data["compute"].toInt());
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const bool need_hidden = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    const auto acc = accumulate_type(hidden);
    const auto gd = cd != at::ScalarType::Undefined ? cd : weight.scalar_type();
    const auto g = grad_out[0].to(acc);
    at::Tensor grad_hidden = need_hidden ? at::empty(hidden.sizes(), hidden.options()) : at::Tensor();
    at::Tensor grad_weight = need_weight ? at::zeros(weight.sizes(), weight.options().dtype(acc)) : at::Tensor();
    const auto w = weight_in(weight, cd);
    for (std::int64_t start = 0; start < hidden.size(0); start += chunk) {
      const auto rows = std::min(chunk, hidden.size(0) - start);
      auto h = hidden.narrow(0, start, rows);
      at::Tensor loss, grad;  // grad: d(-log p)/d logits per row
      ops::cross_entropy_rows(ops::matmul_in(h, w.t(), cd), targets.narrow(0, start, rows), softcap, &loss, &grad);
      grad.mul_(g.narrow(0, start, rows).neg().unsqueeze(1).to(grad.scalar_type()));  // d(upstream)/d logits
      if (need_hidden) grad_hidden.narrow(0, start, rows).copy_(ops::matmul_in(grad, w, gd));
      if (need_weight) add_weight_gradient(grad_weight, grad, h, cd != at::ScalarType::Undefined ? cd : acc);
    }
    if (grad_weight.defined()) grad_weight = grad_weight.to(weight.scalar_type());
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The generalized JSD per chunk, its gradient taken with its logits as ChunkedCrossEntropy's;
// the teacher's chunk comes from the caller (TeacherLogits) and has no gradient.
struct ChunkedJsd : public torch::autograd::Function<ChunkedJsd> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor hidden, at::Tensor weight, TeacherLogits teacher, double beta,
                            std::int64_t chunk, std::int64_t compute, double softcap, bool need_hidden, bool need_weight) {
    const bool grads = need_hidden || need_weight;
    const auto acc = accumulate_type(hidden);
    return sum_taking_gradients(ctx, hidden, weight, chunk, static_cast<at::ScalarType>(compute), need_hidden, need_weight,
                                [&](std::int64_t start, std::int64_t rows, const at::Tensor& projected, at::Tensor& grad) {
                                  auto logits = projected.to(acc);
                                  if (softcap > 0) logits = at::tanh(logits / softcap) * softcap;
                                  at::Tensor loss;
                                  jsd_rows(logits, teacher(start, rows), beta, &loss, grads ? &grad : nullptr);
                                  if (grad.defined() && softcap > 0) grad.mul_(1 - (logits / softcap).square());  // d cap(z) / dz
                                  return loss.sum().item<double>();
                                });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) { return scaled_gradients(ctx, grad_out, 9); }
};

// Weighted entropies per chunk (chunked_entropy_sum), taken with their logits.
struct ChunkedEntropy : public torch::autograd::Function<ChunkedEntropy> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor hidden, at::Tensor weight, at::Tensor row_weights, double temperature,
                            std::int64_t chunk, std::int64_t compute, double softcap, bool need_hidden, bool need_weight) {
    const bool grads = need_hidden || need_weight;
    const auto acc = accumulate_type(hidden);
    return sum_taking_gradients(ctx, hidden, weight, chunk, static_cast<at::ScalarType>(compute), need_hidden, need_weight,
                                [&](std::int64_t start, std::int64_t rows, const at::Tensor& projected, at::Tensor& grad) {
                                  auto capped = projected.to(acc);
                                  if (softcap > 0) capped = at::tanh(capped / softcap) * softcap;
                                  const auto logp = at::log_softmax(capped / temperature, -1);
                                  const auto p = logp.exp();
                                  const auto entropy = -(p * logp).sum(-1);
                                  const auto w = row_weights.narrow(0, start, rows).to(acc);
                                  if (grads) {
                                    grad = -p * (logp + entropy.unsqueeze(1)) * (w / temperature).unsqueeze(1);
                                    if (softcap > 0) grad.mul_(1 - (capped / softcap).square());  // d cap(z) / dz
                                  }
                                  return (w * entropy).sum().item<double>();
                                });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) { return scaled_gradients(ctx, grad_out, 9); }
};

}  // namespace

at::Tensor chunked_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& row_weights, double temperature,
                               std::int64_t chunk_rows, at::ScalarType compute_dtype, double softcap) {
  const auto logit_type = compute_dtype != at::ScalarType::Undefined ? compute_dtype : weight.scalar_type();
  // The chunk's logits, their log-softmax, softmax and gradient in fp32 at once.
  const auto chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(weight.size(0), 3 * std::max<std::int64_t>(4, at::elementSize(logit_type)));
  const bool grads = at::GradMode::is_enabled();
  return ChunkedEntropy::apply(hidden, weight, row_weights, temperature, chunk, static_cast<std::int64_t>(compute_dtype), softcap,
                               grads && hidden.requires_grad(), grads && weight.requires_grad());
}

at::Tensor chunked_token_logps(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets, std::int64_t chunk_rows,
                               at::ScalarType compute_dtype, double softcap, at::Tensor* entropy) {
  const auto logit_type = compute_dtype != at::ScalarType::Undefined ? compute_dtype : weight.scalar_type();
  const auto chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(weight.size(0), at::elementSize(logit_type));
  const auto filled = at::empty({entropy ? hidden.size(0) : 0}, hidden.options().dtype(at::kDouble));
  if (entropy) *entropy = filled;
  return ChunkedTokenLogps::apply(hidden, weight, targets, chunk, static_cast<std::int64_t>(compute_dtype), softcap, filled);
}

// Per row, with s, t the log-softmax of student and teacher and p = exp(s), q = exp(t), the
// gradient with respect to the student's logits z (ds_i/dz_j = delta_ij - p_j):
//   beta 0   L = sum q (t - s)                  dL/dz = p - q
//   beta 1   L = sum p (s - t)                  dL/dz = p (s - t - L)
//   else     L = beta sum q (t - lm) + (1 - beta) sum p (s - lm), lm = log((1 - beta) p + beta q):
//            the terms through lm cancel (sum over i of p_i (beta q_i + (1 - beta) p_i) / m_i = 1),
//            leaving dL/dz = (1 - beta) p (e - sum p e), e = s - lm.
void jsd_rows(const at::Tensor& student, const at::Tensor& teacher, double beta, at::Tensor* loss, at::Tensor* grad) {
  const auto acc = student.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto s = at::log_softmax(student.to(acc), -1), t = at::log_softmax(teacher.to(acc), -1);
  const auto p = s.exp();
  if (beta == 0) {
    const auto q = t.exp();
    *loss = (q * (t - s)).sum(-1);
    if (grad) *grad = p - q;
  } else if (beta == 1) {
    const auto d = s - t;
    *loss = (p * d).sum(-1);
    if (grad) *grad = p * (d - loss->unsqueeze(1));
  } else {
    const auto lm = at::logsumexp(at::stack({s + std::log1p(-beta), t + std::log(beta)}), 0);
    const auto e = s - lm;
    const auto pe = (p * e).sum(-1);
    *loss = beta * (t.exp() * (t - lm)).sum(-1) + (1 - beta) * pe;
    if (grad) *grad = (1 - beta) * p * (e - pe.unsqueeze(1));
  }
}

at::Tensor chunked_jsd_sum(const at::Tensor& hidden, const at::Tensor& weight, const TeacherLogits& teacher_logits, double beta,
                           std::int64_t chunk_rows, at::ScalarType compute_dtype, double softcap) {
  const auto logit_type = compute_dtype != at::ScalarType::Undefined ? compute_dtype : weight.scalar_type();
  // Two chunks of logits live at once (the student's and the teacher's), with their softmaxes.
  const auto chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(weight.size(0), 2 * std::max<std::int64_t>(4, at::elementSize(logit_type)));
  const bool grads = at::GradMode::is_enabled();
  return ChunkedJsd::apply(hidden, weight, teacher_logits, beta, chunk, static_cast<std::int64_t>(compute_dtype), softcap,
                           grads && hidden.requires_grad(), grads && weight.requires_grad());
}

std::int64_t default_chunk_rows(std::int64_t vocab, std::int64_t logit_bytes, std::int64_t budget_bytes) {
  return std::max<std::int64_t>(16, budget_bytes / (std::max<std::int64_t>(1, logit_bytes) * std::max<std::int64_t>(1, vocab)));
}

at::Tensor chunked_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                     std::int64_t chunk_rows, at::ScalarType compute_dtype, double softcap) {
  const auto logit_type = compute_dtype != at::ScalarType::Undefined ? compute_dtype : weight.scalar_type();
  const auto chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(weight.size(0), at::elementSize(logit_type));
  const bool grads = at::GradMode::is_enabled();
  return ChunkedCrossEntropy::apply(hidden, weight, targets, chunk, static_cast<std::int64_t>(compute_dtype), softcap,
                                    grads && hidden.requires_grad(), grads && weight.requires_grad());
}

}  // namespace ctune::train
