// The short causal convolution of Gated DeltaNet layers (ops/gated_delta.h: causal_conv1d_silu,
// conv_state_after): forward and backward are each one pass over the [B, T, C] rows on ATen's
// thread pool, in fp32 (float64 for float64 inputs). Per row (b, t) the taps that count are
// j = 0 .. reach(b, t), reach being how far back t's document goes (K-1 at most, into the state
// when no start precedes t and a state is given). Backward keeps x and the weight and recomputes
// the pre-activation.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/gated_delta.h"
#include "ops/profile_regions.h"

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, T] int64 (starts: [B, T] bool, or empty for one document a row): the largest tap j whose input x[b, t-j] lies in t's document (or in the state).
at::Tensor reach_of(const at::Tensor& starts, std::int64_t B, std::int64_t T, std::int64_t K, bool has_state) {
  auto reach = at::empty({B, T}, at::kLong);
  auto* out = reach.data_ptr<std::int64_t>();
  at::Tensor st = starts.numel() > 0 ? starts.to(at::kBool).contiguous() : at::Tensor();
  const bool* s = st.defined() ? st.data_ptr<bool>() : nullptr;
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t since = has_state ? K - 1 : 0;  // readable inputs before t (capped at K-1)
    for (std::int64_t t = 0; t < T; ++t) {
      if (t > 0) since = std::min(K - 1, since + 1);
      if (s && s[b * T + t]) since = 0;
      out[b * T + t] = since;
    }
  }
  return reach;
}

// The convolution's operands in the accumulation dtype: x [B, T, C], w [K, C], the state as
// [B, K-1, C] (time-major, like x) or empty, and each row's reach.
template <typename scalar_t>
struct Conv {
  std::int64_t B, T, C, K;
  const scalar_t *x, *w, *state;  // w: [K, C] (tap-major); state: nullptr when undefined
  const std::int64_t* reach;

  // x[b, p, c] for p >= -(K-1): the state's inputs before 0.
  const scalar_t* row(std::int64_t b, std::int64_t p) const {
    return p >= 0 ? x + (b * T + p) * C : state + (b * (K - 1) + (K - 1 + p)) * C;
  }
  // The pre-activation of row (b, t) into pre[C].
  void pre(std::int64_t b, std::int64_t t, scalar_t* out) const {
    std::fill(out, out + C, scalar_t(0));
    for (std::int64_t j = 0; j <= reach[b * T + t]; ++j) {
      const scalar_t* xr = row(b, t - j);
      const scalar_t* wj = w + (K - 1 - j) * C;
      for (std::int64_t c = 0; c < C; ++c) out[c] += wj[c] * xr[c];
    }
  }
};

template <typename scalar_t>
scalar_t sigmoid(scalar_t z) {
  return scalar_t(1) / (scalar_t(1) + std::exp(-z));
}

template <typename scalar_t>
void conv_forward(const Conv<scalar_t>& cv, scalar_t* y) {
  at::parallel_for(0, cv.B * cv.T, std::max<std::int64_t>(1, 4096 / cv.C), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      scalar_t* out = y + i * cv.C;
      cv.pre(i / cv.T, i % cv.T, out);
      for (std::int64_t c = 0; c < cv.C; ++c) out[c] = out[c] * sigmoid(out[c]);
    }
  });
}

// dpre = dy · silu'(pre) per row, the weight's gradient from it (per-thread partial sums), then
// dx[p] = sum_j w[K-1-j] dpre[p + j] over the taps of rows p + j that reach back to p.
template <typename scalar_t>
void conv_backward(const Conv<scalar_t>& cv, const scalar_t* dy, scalar_t* dpre, scalar_t* dx, scalar_t* dw_partial) {
  const auto C = cv.C, K = cv.K, T = cv.T;
  const std::int64_t grain = std::max<std::int64_t>(1, 4096 / C);
  at::parallel_for(0, cv.B * T, grain, [&](std::int64_t begin, std::int64_t end) {
    scalar_t* dw = dw_partial + at::get_thread_num() * C * K;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t b = i / T, t = i % T;
      scalar_t* d = dpre + i * C;
      cv.pre(b, t, d);
      for (std::int64_t c = 0; c < C; ++c) {
        const scalar_t z = d[c], s = sigmoid(z);
        d[c] = dy[i * C + c] * s * (scalar_t(1) + z * (scalar_t(1) - s));
      }
      for (std::int64_t j = 0; j <= cv.reach[i]; ++j) {
        const scalar_t* xr = cv.row(b, t - j);
        scalar_t* dwj = dw + (K - 1 - j) * C;
        for (std::int64_t c = 0; c < C; ++c) dwj[c] += d[c] * xr[c];
      }
    }
  });
  at::parallel_for(0, cv.B * T, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t b = i / T, p = i % T;
      scalar_t* out = dx + i * C;
      std::fill(out, out + C, scalar_t(0));
      for (std::int64_t j = 0; j < K && p + j < T; ++j) {
        if (cv.reach[b * T + p + j] < j) continue;
        const scalar_t* d = dpre + (i + j) * C;
        const scalar_t* wj = cv.w + (K - 1 - j) * C;
        for (std::int64_t c = 0; c < C; ++c) out[c] += wj[c] * d[c];
      }
    }
  });
}

at::ScalarType acc_of(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// The operands in the accumulation dtype, kept alive beside the raw view.
struct Operands {
  at::Tensor x, w, state, reach;
  template <typename scalar_t>
  Conv<scalar_t> view() const {
    return {x.size(0), x.size(1), x.size(2), w.size(0), x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
            state.defined() ? state.data_ptr<scalar_t>() : nullptr, reach.data_ptr<std::int64_t>()};
  }
};

Operands operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& starts, const at::Tensor& state) {
  const auto acc = acc_of(x);
  Operands o;
  o.x = x.to(acc).contiguous();
  o.w = weight.to(acc).t().contiguous();  // [K, C]
  if (state.numel() > 0) o.state = state.to(acc).transpose(1, 2).contiguous();
  o.reach = reach_of(starts, x.size(0), x.size(1), weight.size(1), o.state.defined());
  return o;
}

struct CausalConvSilu : public torch::autograd::Function<CausalConvSilu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& starts,
                            const at::Tensor& state) {
    const Operands o = operands(x, weight, starts, state);
    auto y = at::empty(o.x.sizes(), o.x.options());
    AT_DISPATCH_FLOATING_TYPES(o.x.scalar_type(), "causal_conv1d_silu", [&] { conv_forward(o.view<scalar_t>(), y.data_ptr<scalar_t>()); });
    ctx->save_for_backward({x, weight, starts, state});
    return y.to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const Operands o = operands(x, weight, saved[2], saved[3]);
    const auto dy = grad[0].to(o.x.scalar_type()).contiguous();
    auto dpre = at::empty_like(o.x), dx = at::empty_like(o.x);
    auto dw = at::zeros({at::get_num_threads(), o.w.size(0), o.w.size(1)}, o.w.options());  // per thread [K, C]
    AT_DISPATCH_FLOATING_TYPES(o.x.scalar_type(), "causal_conv1d_silu_backward", [&] {
      conv_backward(o.view<scalar_t>(), dy.data_ptr<scalar_t>(), dpre.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(),
                    dw.data_ptr<scalar_t>());
    });
    return {dx.to(x.scalar_type()), dw.sum(0).t().to(weight.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_conv1d_silu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& starts, const at::Tensor& state) {
  TORCH_CHECK(x.dim() == 3 && weight.dim() == 2 && weight.size(0) == x.size(2) && weight.size(1) >= 1,
              "causal conv1d: x ", x.sizes(), " and weight ", weight.sizes(), ", expected [B, T, C] and [C, K]");
  TORCH_CHECK(!starts.defined() || starts.sizes() == at::IntArrayRef({x.size(0), x.size(1)}), "causal conv1d: starts ", starts.sizes(),
              ", expected [", x.size(0), ", ", x.size(1), "]");
  TORCH_CHECK(!state.defined() || state.sizes() == at::IntArrayRef({x.size(0), x.size(2), weight.size(1) - 1}), "causal conv1d: state ",
              state.sizes(), ", expected [", x.size(0), ", ", x.size(2), ", ", weight.size(1) - 1, "]");
  RECORD_USER_SCOPE(region::kActivation);
  if (x.numel() == 0) return at::empty_like(x);
  // A custom function's tensor arguments must be defined: absent ones travel as empty tensors.
  const auto none = at::empty({0});
  return CausalConvSilu::apply(x, weight, starts.defined() ? starts : none,
                               state.defined() && weight.size(1) > 1 ? state.detach() : none);
}

at::Tensor conv_state_after(const at::Tensor& x, const at::Tensor& state, std::int64_t kernel) {
  TORCH_CHECK(x.dim() == 3 && kernel >= 1, "conv state: x ", x.sizes(), ", kernel ", kernel);
  at::NoGradGuard no_grad;
  const auto B = x.size(0), C = x.size(2), keep = kernel - 1;
  const auto prev = state.defined() ? state.to(x.scalar_type()) : at::zeros({B, C, keep}, x.options());
  TORCH_CHECK(prev.sizes() == at::IntArrayRef({B, C, keep}), "conv state: state ", prev.sizes(), ", expected [", B, ", ", C, ", ", keep,
              "]");
  const auto all = at::cat({prev, x.transpose(1, 2)}, 2);  // [B, C, K-1 + T], oldest first
  return all.narrow(2, all.size(2) - keep, keep).contiguous();
}

}  // namespace ctune::ops
