#include "ops/fused_norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "ops/cpu_kernels.h"
#include "ops/profile_regions.h"

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType acc_of(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

at::ScalarType out_dtype(const at::Tensor& x, const at::Tensor& weight, bool offset) {
  return offset ? x.scalar_type() : at::promote_types(weight.scalar_type(), x.scalar_type());
}

// The kernel covers outputs in x's dtype or in the accumulation dtype.
bool fused_kernel_for(const at::Tensor& x, const at::Tensor& weight, bool offset) {
  if (!fused_ops_enabled() || !x.device().is_cpu() || elem_index(x.scalar_type()) < 0 || x.numel() == 0) return false;
  const auto o = out_dtype(x, weight, offset);
  return o == x.scalar_type() || o == acc_of(x);
}

at::Tensor composite(const at::Tensor& x, const at::Tensor& weight, double eps, bool offset) {
  auto x32 = x.to(at::kFloat);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  x32 = x32 * at::rsqrt(variance + eps);
  if (offset) return (x32 * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
  return weight * x32.to(x.scalar_type());
}

// The weight the kernel multiplies by, in the accumulation dtype: w, or 1 + w.
at::Tensor kernel_weight(const at::Tensor& weight, const at::Tensor& x, bool offset) {
  auto w = weight.detach().to(acc_of(x)).contiguous();
  return offset ? w + 1.0 : w;
}

NormArgs args_for(const at::Tensor& x, const at::Tensor& w, double eps, bool offset) {
  NormArgs a{};
  a.x = x.data_ptr();
  a.w = w.data_ptr();
  a.dim = x.size(-1);
  a.eps = eps;
  a.offset = offset;
  return a;
}

std::int64_t grain(std::int64_t dim) { return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, dim)); }

struct RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight, double eps, bool offset) {
    const auto x = input.contiguous();
    const auto w = kernel_weight(weight, x, offset);
    const auto o = out_dtype(x, weight, offset);
    const bool out_f32 = o != x.scalar_type();
    auto out = at::empty(x.sizes(), x.options().dtype(o));
    const auto rows = x.numel() / x.size(-1);
    auto rstd = at::empty({rows}, x.options().dtype(acc_of(x)));
    NormArgs a = args_for(x, w, eps, offset);
    a.out = out.data_ptr();
    a.rstd = rstd.data_ptr();
    const auto kernel = cpu_kernels().norm_forward[elem_index(x.scalar_type())][out_f32 ? 1 : 0];
    at::parallel_for(0, rows, grain(a.dim), [&](std::int64_t b, std::int64_t e) { kernel(a, b, e); });
    ctx->save_for_backward({x, rstd, w});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["out_f32"] = out_f32;
    ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &rstd = saved[1], &w = saved[2];
    const bool offset = ctx->saved_data["offset"].toBool();
    const bool out_f32 = ctx->saved_data["out_f32"].toBool();
    const auto out_type = out_f32 ? acc_of(x) : x.scalar_type();
    auto d_out = grad[0].to(out_type).contiguous();
    auto d_x = at::empty_like(x);
    const auto rows = x.numel() / x.size(-1), D = x.size(-1);
    const bool need_weight = ctx->needs_input_grad(1);
    // Each thread sums its rows' share of d weight into its own row of `partial`.
    at::Tensor partial = need_weight ? at::zeros({at::get_num_threads(), D}, w.options()) : at::Tensor();
    NormArgs a = args_for(x, w, ctx->saved_data["eps"].toDouble(), offset);
    a.rstd = rstd.data_ptr();
    a.d_out = d_out.data_ptr();
    a.d_x = d_x.data_ptr();
    const auto kernel = cpu_kernels().norm_backward[elem_index(x.scalar_type())][out_f32 ? 1 : 0];
    at::parallel_for(0, rows, grain(D), [&](std::int64_t b, std::int64_t e) {
      NormArgs mine = a;
      if (need_weight) mine.d_weight = static_cast<char*>(partial.data_ptr()) + at::get_thread_num() * D * partial.element_size();
      kernel(mine, b, e);
    });
    at::Tensor d_weight;
    if (need_weight) d_weight = partial.sum(0).to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    return {d_x, d_weight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool offset) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "RMSNorm: input ", x.sizes(), " with weight ",
              weight.sizes());
  RECORD_USER_SCOPE(region::kNorm);
  if (!fused_kernel_for(x, weight, offset)) return composite(x, weight, eps, offset);
  return RMSNormFunction::apply(x, weight, eps, offset);
}

}  // namespace ctune::ops
