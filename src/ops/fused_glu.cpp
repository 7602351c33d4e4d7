#include "ops/fused_glu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "ops/compute.h"
#include "ops/cpu_kernels.h"
#include "ops/profile_regions.h"

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool fused_kernel_for(const at::Tensor& t) { return fused_ops_enabled() && t.device().is_cpu() && elem_index(t.scalar_type()) >= 0; }

// The row stride of t seen as [rows, t.size(-1)] (last dimension contiguous, leading dimensions
// evenly strided), or -1 when t is not such a matrix.
std::int64_t row_stride(const at::Tensor& t) {
  if (t.dim() == 0 || t.stride(-1) != 1) return -1;
  if (t.dim() == 1) return t.size(0);
  const std::int64_t ld = t.stride(-2);
  std::int64_t expected = ld;
  for (std::int64_t i = t.dim() - 2; i >= 0; --i) {
    if (t.size(i) != 1 && t.stride(i) != expected) return -1;
    expected *= t.size(i);
  }
  return ld;
}

at::Tensor as_rows(const at::Tensor& t, std::int64_t* ld) {
  *ld = row_stride(t);
  if (*ld >= 0) return t;
  auto c = t.contiguous();
  *ld = c.size(-1);
  return c;
}

int kind_code(GluKind k) { return k == GluKind::silu ? 0 : 1; }

std::int64_t rows_of(const at::Tensor& t) { return t.numel() / std::max<std::int64_t>(1, t.size(-1)); }

void run(bool backward, const GluArgs& a, std::int64_t rows, at::ScalarType dtype) {
  const auto& k = cpu_kernels();
  const auto fn = (backward ? k.glu_backward : k.glu_forward)[elem_index(dtype)];
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, a.width));
  at::parallel_for(0, rows, grain, [&](std::int64_t b, std::int64_t e) { fn(a, b, e); });
}

// out = act(gate) · up over gate/up rows of `width` (strides ld_gate, ld_up).
at::Tensor forward_rows(const at::Tensor& gate, std::int64_t ld_gate, const at::Tensor& up, std::int64_t ld_up, std::int64_t width,
                        GluKind kind, at::IntArrayRef out_sizes) {
  auto out = at::empty(out_sizes, gate.options().memory_format(at::MemoryFormat::Contiguous));
  GluArgs a{};
  a.kind = kind_code(kind);
  a.width = width;
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.ld_gate = ld_gate;
  a.ld_up = ld_up;
  a.out = out.data_ptr();
  a.ld_out = width;
  run(false, a, rows_of(out), gate.scalar_type());
  return out;
}

void backward_rows(const at::Tensor& gate, std::int64_t ld_gate, const at::Tensor& up, std::int64_t ld_up, const at::Tensor& d_out,
                   std::int64_t width, GluKind kind, void* d_gate, std::int64_t ld_d_gate, void* d_up, std::int64_t ld_d_up) {
  GluArgs a{};
  a.kind = kind_code(kind);
  a.width = width;
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.ld_gate = ld_gate;
  a.ld_up = ld_up;
  a.d_out = d_out.data_ptr();
  a.ld_d_out = width;
  a.d_gate = d_gate;
  a.d_up = d_up;
  a.ld_d_gate = ld_d_gate;
  a.ld_d_up = ld_d_up;
  run(true, a, rows_of(d_out), gate.scalar_type());
}

struct GatedActivation : public torch::autograd::Function<GatedActivation> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up, std::int64_t kind) {
    std::int64_t ld_gate, ld_up;
    auto g = as_rows(gate, &ld_gate), u = as_rows(up, &ld_up);
    ctx->save_for_backward({g, u});
    ctx->saved_data["kind"] = kind;
    return forward_rows(g, ld_gate, u, ld_up, gate.size(-1), static_cast<GluKind>(kind), gate.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    const auto &g = saved[0], &u = saved[1];
    const auto width = g.size(-1);
    auto d_out = grad[0].to(g.scalar_type()).contiguous();
    auto d_gate = at::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));
    auto d_up = at::empty(u.sizes(), u.options().memory_format(at::MemoryFormat::Contiguous));
    backward_rows(g, row_stride(g), u, row_stride(u), d_out, width, static_cast<GluKind>(ctx->saved_data["kind"].toInt()),
                  d_gate.data_ptr(), width, d_up.data_ptr(), width);
    return {d_gate, d_up, at::Tensor()};
  }
};

struct FusedGatedActivation : public torch::autograd::Function<FusedGatedActivation> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& both, std::int64_t kind) {
    std::int64_t ld;
    auto b = as_rows(both, &ld);
    const auto width = both.size(-1) / 2;
    ctx->save_for_backward({b});
    ctx->saved_data["kind"] = kind;
    auto sizes = both.sizes().vec();
    sizes.back() = width;
    return forward_rows(b, ld, b.narrow(-1, width, width), ld, width, static_cast<GluKind>(kind), sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto b = ctx->get_saved_variables()[0];
    const auto width = b.size(-1) / 2;
    const auto ld = row_stride(b);
    auto d_out = grad[0].to(b.scalar_type()).contiguous();
    auto d_both = at::empty(b.sizes(), b.options().memory_format(at::MemoryFormat::Contiguous));
    auto* base = static_cast<char*>(d_both.data_ptr());
    backward_rows(b, ld, b.narrow(-1, width, width), ld, d_out, width, static_cast<GluKind>(ctx->saved_data["kind"].toInt()), base,
                  2 * width, base + width * static_cast<std::int64_t>(d_both.element_size()), 2 * width);
    return {d_both, at::Tensor()};
  }
};

at::Tensor composite(const at::Tensor& gate, const at::Tensor& up, GluKind kind) {
  return (kind == GluKind::silu ? silu_any(gate) : gelu_tanh_any(gate)) * up;
}

}  // namespace

at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, GluKind kind) {
  TORCH_CHECK(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(), "gated activation: gate ", gate.sizes(), " ",
              gate.scalar_type(), " and up ", up.sizes(), " ", up.scalar_type(), " differ");
  RECORD_USER_SCOPE(region::kActivation);
  if (!fused_kernel_for(gate) || gate.numel() == 0) return composite(gate, up, kind);
  return GatedActivation::apply(gate, up, static_cast<std::int64_t>(kind));
}

at::Tensor gated_activation_fused(const at::Tensor& both, GluKind kind) {
  TORCH_CHECK(both.dim() >= 1 && both.size(-1) % 2 == 0, "gated activation: a fused gate_up of ", both.sizes(),
              " (the last dimension must be 2 I)");
  RECORD_USER_SCOPE(region::kActivation);
  const auto width = both.size(-1) / 2;
  if (!fused_kernel_for(both) || both.numel() == 0) return composite(both.narrow(-1, 0, width), both.narrow(-1, width, width), kind);
  return FusedGatedActivation::apply(both, static_cast<std::int64_t>(kind));
}

}  // namespace ctune::ops
