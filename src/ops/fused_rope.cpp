#include "ops/fused_rope.h"

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

RopeArgs args_for(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  RopeArgs a{};
  a.sb = x.stride(0);
  a.st = x.stride(1);
  a.sh = x.stride(2);
  a.B = x.size(0);
  a.T = x.size(1);
  a.heads = x.size(2);
  a.d = x.size(3);
  a.rot = cos.size(-1);
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  return a;
}

void run(RopeRowsFn fn, const RopeArgs& a) {
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, a.heads * a.d));
  at::parallel_for(0, a.B * a.T, grain, [&](std::int64_t b, std::int64_t e) { fn(a, b, e); });
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            std::int64_t dtype) {
    const auto out_type = static_cast<at::ScalarType>(dtype);
    auto out = at::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options().dtype(out_type));
    RopeArgs a = args_for(x, cos, sin);
    a.x = x.data_ptr();
    a.out = out.data_ptr();
    run(cpu_kernels().rope_forward[elem_index(x.scalar_type())][elem_index(out_type)], a);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    const auto x_type = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto sizes = ctx->saved_data["x_sizes"].toIntVector();
    auto d_out = grad[0].contiguous();
    auto d_x = at::empty(sizes, d_out.options().dtype(x_type));
    RopeArgs a = args_for(d_x, saved[0], saved[1]);
    a.d_out = d_out.data_ptr();
    a.d_x = d_x.data_ptr();
    run(cpu_kernels().rope_backward[elem_index(x_type)][elem_index(d_out.scalar_type())], a);
    return {d_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool fused_kernel_for(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::ScalarType out) {
  const int i = elem_index(x.scalar_type()), o = elem_index(out);
  if (!fused_ops_enabled() || !x.device().is_cpu() || i < 0 || o < 0 || x.numel() == 0 || x.stride(3) != 1) return false;
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (cos.scalar_type() != acc || sin.scalar_type() != acc || !cos.is_contiguous()) return false;
  const auto& k = cpu_kernels();
  return k.rope_forward[i][o] != nullptr && k.rope_backward[i][o] != nullptr;
}

}  // namespace

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (cos.size(-1) < x.size(-1)) {  // partial rotary: the trailing dimensions pass through
    const auto rot = cos.size(-1);
    return at::cat({apply_rope(x.narrow(-1, 0, rot), cos, sin), x.narrow(-1, rot, x.size(-1) - rot)}, -1);
  }
  const auto half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // broadcast over heads
  return x * c + rotated * s;
}

at::Tensor rope_heads_first(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::ScalarType dtype) {
  TORCH_CHECK(x.dim() == 4 && cos.dim() == 3 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(0) && cos.size(1) == x.size(1) &&
                  cos.size(2) <= x.size(3) && cos.size(2) % 2 == 0,
              "RoPE: x ", x.sizes(), " with tables ", cos.sizes(), " (need [B, T, heads, d] and [B, T, rot], rot even, <= d)");
  RECORD_USER_SCOPE(region::kRope);
  if (!fused_kernel_for(x, cos, sin, dtype)) return apply_rope(x.transpose(1, 2), cos, sin).to(dtype).contiguous();
  return RopeFunction::apply(x, cos, sin.contiguous(), static_cast<std::int64_t>(dtype));
}

}  // namespace ctune::ops
