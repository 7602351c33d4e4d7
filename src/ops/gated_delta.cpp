// The gated delta rule (ops/gated_delta.h): the chunked form's forward and hand-derived backward
// as one custom autograd function, and the per-token recurrence for decoding. Chunked tensors
// are laid out [N, B, Hv, C, D] (chunk first) so that chunk n's slice is contiguous for the
// scan, and every other product is one batched matmul over N·B·Hv.
#include "ops/gated_delta.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "ops/gated_delta_cpu.h"
#include "ops/profile_regions.h"

namespace ctune::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kNormEps = 1e-6;  // transformers' l2norm: x * rsqrt(sum x^2 + 1e-6)

struct Shape {
  std::int64_t B, T, Hk, Hv, r, Dk, Dv;
  std::int64_t C, N, Tp;  // chunk length (<= T), chunks, padded length N * C
  at::ScalarType acc;     // float64 for float64 inputs, else float32
};

Shape shape_of(const at::Tensor& q, const at::Tensor& v, std::int64_t chunk) {
  Shape s{};
  s.B = q.size(0), s.T = q.size(1), s.Hk = q.size(2), s.Dk = q.size(3);
  s.Hv = v.size(2), s.Dv = v.size(3);
  s.r = s.Hv / s.Hk;
  s.C = std::min(chunk, s.T);
  s.N = (s.T + s.C - 1) / s.C;
  s.Tp = s.N * s.C;
  s.acc = q.scalar_type() == at::kDouble || v.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return s;
}

// A custom function's tensor arguments must be defined: an absent optional one travels as an
// empty tensor.
at::Tensor given(const at::Tensor& t) { return t.defined() ? t : at::empty({0}); }
bool present(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

// [B, T, H, D] -> [N, B, H, C, D], zero-padded to N·C tokens.
at::Tensor to_chunks(const at::Tensor& t, const Shape& s) {
  const auto p = s.Tp > s.T ? at::constant_pad_nd(t, {0, 0, 0, 0, 0, s.Tp - s.T}) : t;
  return p.reshape({s.B, s.N, s.C, t.size(2), t.size(3)}).permute({1, 0, 3, 2, 4}).contiguous();
}
// [B, T, H] -> [N, B, H, C].
at::Tensor to_chunks3(const at::Tensor& t, const Shape& s) { return to_chunks(t.unsqueeze(-1), s).squeeze(-1); }

// [N, B, H, C, D] -> [B, T, H, D].
at::Tensor from_chunks(const at::Tensor& t, const Shape& s) {
  return t.permute({1, 0, 3, 2, 4}).reshape({s.B, s.Tp, t.size(2), t.size(4)}).narrow(1, 0, s.T);
}
at::Tensor from_chunks3(const at::Tensor& t, const Shape& s) { return from_chunks(t.unsqueeze(-1), s).squeeze(-1); }

at::Tensor tr(const at::Tensor& t) { return t.transpose(-1, -2); }

// x / |x| as transformers computes it, and the factor rsqrt(sum x^2 + eps) [.., 1].
std::pair<at::Tensor, at::Tensor> l2norm(const at::Tensor& x) {
  auto rs = at::rsqrt(x.square().sum(-1, true) + kNormEps);
  return {x * rs, rs};
}

// The gradient of x from that of n = x · rs: rs (dn - n (n · dn)) (since d rs / dx = -rs³ x).
at::Tensor l2norm_backward(const at::Tensor& n, const at::Tensor& rs, const at::Tensor& dn) {
  return rs * (dn - n * (n * dn).sum(-1, true));
}

// Query/key heads [B, T, Hk, D] to the value heads they serve [B, T, Hv, D], and back (summed).
at::Tensor to_value_heads(const at::Tensor& t, const Shape& s) { return s.r == 1 ? t : t.repeat_interleave(s.r, 2); }
at::Tensor to_key_heads(const at::Tensor& t, const Shape& s) {
  return s.r == 1 ? t : t.reshape({s.B, s.T, s.Hk, s.r, t.size(-1)}).sum(3);
}

// Every per-chunk quantity of the chunked form (ops/gated_delta.h), [N, B, Hv, C, ..].
struct Chunks {
  Shape s;
  at::Tensor nq, rq, nk, rk;  // the unit q and k rows [B, T, Hk, Dk] and their rsqrt factors
  at::Tensor q, k, v;         // q̂ = nq Dk^-1/2, k̂ = nk, v
  at::Tensor beta, gamma, w;  // β, Γ_i (decay from the carried state), w_j = D[C-1, j]; [N, B, Hv, C]
  at::Tensor decay;           // D [C, C]: exp(cs_i - cs_j), j <= i in one document, else 0
  at::Tensor Z, P;            // k̂ k̂ᵀ ⊙ D strictly lower; q̂ k̂ᵀ ⊙ D
  at::Tensor A;               // diag(β) Z: the UT system is (I + A) R = X
  at::Tensor R;               // [W | Kc] [C, Dv + Dk]
  at::Tensor Kw;              // diag(w) k̂
  at::Tensor glast;           // Γ_{C-1} [N, B, Hv]

  at::Tensor W() const { return R.narrow(-1, 0, s.Dv); }
  at::Tensor Kc() const { return R.narrow(-1, s.Dv, s.Dk); }
};

Chunks prepare(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& g_in,
               const at::Tensor& beta_in, const at::Tensor& starts, std::int64_t chunk) {
  Chunks c;
  Shape& s = c.s;
  s = shape_of(q_in, v_in, chunk);
  std::tie(c.nq, c.rq) = l2norm(q_in.to(s.acc));
  std::tie(c.nk, c.rk) = l2norm(k_in.to(s.acc));
  c.q = to_chunks(to_value_heads(c.nq * (1.0 / std::sqrt(static_cast<double>(s.Dk))), s), s);
  c.k = to_chunks(to_value_heads(c.nk, s), s);
  c.v = to_chunks(v_in.to(s.acc), s);
  c.beta = to_chunks3(beta_in.to(s.acc), s);  // padded tokens: β = 0, so they write nothing
  const auto cs = to_chunks3(g_in.to(s.acc), s).cumsum(-1);  // padded tokens: g = 0, no decay

  // Document index inside each chunk ([N, B, 1, C], broadcast over heads): the number of starts
  // in [chunk start, i]. Same index = no start in (j, i].
  auto st = present(starts) ? starts.to(at::kBool) : at::zeros({s.B, s.T}, q_in.options().dtype(at::kBool));
  if (s.Tp > s.T) st = at::constant_pad_nd(st, {0, s.Tp - s.T});
  const auto doc = st.reshape({s.B, s.N, s.C}).permute({1, 0, 2}).to(at::kInt).cumsum(-1).unsqueeze(2);
  const auto causal = at::ones({s.C, s.C}, st.options()).tril();
  const auto same = doc.unsqueeze(-1).eq(doc.unsqueeze(-2)).logical_and(causal);
  const auto first = doc.eq(0), last = doc.eq(doc.narrow(-1, s.C - 1, 1));
  constexpr double inf = std::numeric_limits<double>::infinity();
  c.decay = (cs.unsqueeze(-1) - cs.unsqueeze(-2)).masked_fill(same.logical_not(), -inf).exp();
  c.gamma = cs.masked_fill(first.logical_not(), -inf).exp();
  c.w = (cs.narrow(-1, s.C - 1, 1) - cs).masked_fill(last.logical_not(), -inf).exp();
  c.glast = c.gamma.select(-1, s.C - 1);

  c.Z = (at::matmul(c.k, tr(c.k)) * c.decay).tril(-1);
  c.P = at::matmul(c.q, tr(c.k)) * c.decay;
  c.A = c.Z * c.beta.unsqueeze(-1);
  const auto X = at::cat({c.v * c.beta.unsqueeze(-1), c.k * (c.beta * c.gamma).unsqueeze(-1)}, -1);
  c.R = at::linalg_solve_triangular(c.A, X, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  c.Kw = c.k * c.w.unsqueeze(-1);
  return c;
}

// [B, Hv, ..] slices as one batch of matrices.
at::Tensor heads(const at::Tensor& t) { return t.flatten(0, 1); }

// The scan over chunks: S_all [N + 1, B, Hv, Dk, Dv] (S_all[n] is carried into chunk n, S_all[N]
// the final state) and U = W - Kc S [N, B, Hv, C, Dv].
std::pair<at::Tensor, at::Tensor> scan_forward(const Chunks& c, const at::Tensor& S0) {
  const Shape& s = c.s;
  auto S_all = at::empty({s.N + 1, s.B, s.Hv, s.Dk, s.Dv}, c.v.options());
  auto U = c.W().contiguous();
  const auto Kc = c.Kc();
  S_all[0].copy_(S0);
  for (std::int64_t n = 0; n < s.N; ++n) {
    auto Un = heads(U[n]);
    Un.baddbmm_(heads(Kc[n]), heads(S_all[n]), 1, -1);
    auto next = S_all[n + 1];
    at::mul_out(next, S_all[n], c.glast[n].unsqueeze(-1).unsqueeze(-1));
    heads(next).baddbmm_(tr(heads(c.Kw[n])), Un);
  }
  return {S_all, U};
}

at::Tensor initial_or_zeros(const at::Tensor& initial_state, const Shape& s, const at::TensorOptions& opt) {
  if (!present(initial_state)) return at::zeros({s.B, s.Hv, s.Dk, s.Dv}, opt);
  TORCH_CHECK(initial_state.sizes() == at::IntArrayRef({s.B, s.Hv, s.Dk, s.Dv}), "gated delta rule: initial_state ",
              initial_state.sizes(), ", expected [", s.B, ", ", s.Hv, ", ", s.Dk, ", ", s.Dv, "]");
  return initial_state.to(opt.dtype());
}

// The per-head CPU kernel's inputs (ops/gated_delta_cpu.h), and the unit rows and rsqrt factors
// the backward's L2 norm needs.
struct Fused {
  gated_delta_cpu::Inputs in;
  at::Tensor nq, rq, nk, rk;
};

Fused fused_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                   const at::Tensor& starts, const at::Tensor& initial_state, std::int64_t chunk) {
  const Shape s = shape_of(q, v, chunk);
  Fused f;
  std::tie(f.nq, f.rq) = l2norm(q.to(at::kFloat));
  std::tie(f.nk, f.rk) = l2norm(k.to(at::kFloat));
  f.in.q = (f.nq * (1.0 / std::sqrt(static_cast<double>(s.Dk)))).contiguous();
  f.in.k = f.nk.contiguous();
  f.in.v = v.to(at::kFloat);
  if (f.in.v.stride(3) != 1) f.in.v = f.in.v.contiguous();
  f.in.g = g.to(at::kFloat).contiguous();
  f.in.beta = beta.to(at::kFloat).contiguous();
  if (present(starts)) f.in.starts = starts.to(at::kBool).contiguous();
  if (present(initial_state)) f.in.state = initial_or_zeros(initial_state, s, f.in.v.options()).contiguous();
  f.in.chunk = chunk;
  return f;
}

variable_list fused_backward(const variable_list& saved, std::int64_t chunk, const variable_list& grad) {
  const auto &q_in = saved[0], &k_in = saved[1], &v_in = saved[2], &g_in = saved[3], &beta_in = saved[4];
  const Fused f = fused_inputs(q_in, k_in, v_in, g_in, beta_in, saved[5], saved[6], chunk);
  const Shape s = shape_of(q_in, v_in, chunk);
  const auto dout = grad[0].defined() ? grad[0].to(at::kFloat).contiguous() : at::zeros({s.B, s.T, s.Hv, s.Dv}, f.in.v.options());
  const auto dstate = grad[1].defined() ? grad[1].to(at::kFloat).contiguous() : at::Tensor();
  auto r = gated_delta_cpu::backward(f.in, dout, dstate);
  // One input's gradient at a time, each kernel output released once read.
  auto dq = l2norm_backward(f.nq, f.rq, to_key_heads(r.dq, s) * (1.0 / std::sqrt(static_cast<double>(s.Dk)))).to(q_in.scalar_type());
  r.dq.reset();
  auto dk = l2norm_backward(f.nk, f.rk, to_key_heads(r.dk, s)).to(k_in.scalar_type());
  r.dk.reset();
  return {dq,
          dk,
          r.dv.to(v_in.scalar_type()),
          r.dg.to(g_in.scalar_type()),
          r.dbeta.to(beta_in.scalar_type()),
          at::Tensor(),
          at::Tensor(),
          at::Tensor()};
}

std::atomic<bool> g_kernel_on{true};

bool kernel_serves(const at::Tensor& q, const at::Tensor& v) {
  return g_kernel_on.load() && gated_delta_cpu::serves(v.device(), shape_of(q, v, 1).acc);
}

struct GatedDeltaFunction : public torch::autograd::Function<GatedDeltaFunction> {
  // Returns {out [B, T, Hv, Dv] in v's dtype, final state [B, Hv, Dk, Dv] in the accumulation dtype}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& g, const at::Tensor& beta, const at::Tensor& starts, const at::Tensor& initial_state,
                               std::int64_t chunk) {
    ctx->save_for_backward({q, k, v, g, beta, starts, initial_state});
    ctx->saved_data["chunk"] = chunk;
    if (kernel_serves(q, v)) {
      const auto f = gated_delta_cpu::forward(fused_inputs(q, k, v, g, beta, starts, initial_state, chunk).in);
      return {f.out.to(v.scalar_type()), f.state};
    }
    const Chunks c = prepare(q, k, v, g, beta, starts, chunk);
    const Shape& s = c.s;
    auto [S_all, U] = scan_forward(c, initial_or_zeros(initial_state, s, c.v.options()));
    // o = diag(Γ) q̂ S + P U, every chunk at once.
    auto out = at::matmul(c.P, U);
    heads(heads(out)).baddbmm_(heads(heads(c.q * c.gamma.unsqueeze(-1))), heads(heads(S_all.narrow(0, 0, s.N))));
    // Backward recomputes everything from the inputs (ops/gated_delta.h).
    return {from_chunks(out, s).to(v.scalar_type()), S_all[s.N]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    if (kernel_serves(saved[0], saved[2]))
      return fused_backward(saved, ctx->saved_data["chunk"].toInt(), grad);
    const auto &q_in = saved[0], &k_in = saved[1], &v_in = saved[2], &g_in = saved[3], &beta_in = saved[4];
    const Chunks c = prepare(q_in, k_in, v_in, g_in, beta_in, saved[5], ctx->saved_data["chunk"].toInt());
    const Shape& s = c.s;
    const auto opt = c.v.options();
    auto [S_all, U] = scan_forward(c, initial_or_zeros(saved[6], s, opt));
    const auto S = S_all.narrow(0, 0, s.N);
    const auto dO = grad[0].defined() ? to_chunks(grad[0].to(s.acc), s) : at::zeros({s.N, s.B, s.Hv, s.C, s.Dv}, opt);
    auto dS = grad[1].defined() ? grad[1].to(s.acc).contiguous() : at::zeros({s.B, s.Hv, s.Dk, s.Dv}, opt);
    const auto qg = c.q * c.gamma.unsqueeze(-1);

    // Reverse scan: dU_n = Pᵀ dO_n + Kw dS_{n+1}; dS_n = Γ_last dS_{n+1} + (Γ q̂)ᵀ dO_n - Kcᵀ dU_n.
    auto dU = at::matmul(tr(c.P), dO);
    const auto qg_dO = at::matmul(tr(qg), dO);
    auto dS_next = at::empty({s.N, s.B, s.Hv, s.Dk, s.Dv}, opt);
    const auto Kc = c.Kc();
    for (std::int64_t n = s.N - 1; n >= 0; --n) {
      dS_next[n].copy_(dS);
      auto dUn = heads(dU[n]);
      dUn.baddbmm_(heads(c.Kw[n]), heads(dS));
      dS = dS * c.glast[n].unsqueeze(-1).unsqueeze(-1) + qg_dO[n];
      heads(dS).baddbmm_(tr(heads(Kc[n])), dUn, 1, -1);
    }

    // The products the scan fed, every chunk at once.
    const auto dO_St = at::matmul(dO, tr(S));  // d(Γ q̂)
    auto dq = dO_St * c.gamma.unsqueeze(-1);
    auto dgamma = (c.q * dO_St).sum(-1);
    const auto dP = at::matmul(dO, tr(U));
    const auto dKw = at::matmul(U, tr(dS_next));
    const auto dglast = (S * dS_next).sum({-2, -1});

    // Through the UT system: R = (I + A)⁻¹ X, so dX = (I + A)⁻ᵀ dR and dA = -dX Rᵀ.
    const auto dR = at::cat({dU, -at::matmul(dU, tr(S))}, -1);
    const auto dX = at::linalg_solve_triangular(tr(c.A), dR, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    const auto dA = -at::matmul(dX, tr(c.R));
    const auto dVb = dX.narrow(-1, 0, s.Dv), dKb = dX.narrow(-1, s.Dv, s.Dk);
    const auto beta_ = c.beta.unsqueeze(-1);
    const auto dv = dVb * beta_;
    const auto k_dKb = (c.k * dKb).sum(-1);
    const auto dbeta = (c.v * dVb).sum(-1) + c.gamma * k_dKb + (dA * c.Z).sum(-1);
    auto dk = dKb * (c.beta * c.gamma).unsqueeze(-1);
    dgamma += c.beta * k_dKb;

    // A = diag(β) (k̂ k̂ᵀ ⊙ D), P = q̂ k̂ᵀ ⊙ D, Kw = diag(w) k̂.
    const auto dZ = (dA * beta_).tril(-1);
    const auto dKK = dZ * c.decay;
    dk += at::matmul(dKK + tr(dKK), c.k);
    const auto dQK = dP * c.decay;
    dq += at::matmul(dQK, c.k);
    dk += at::matmul(tr(dQK), c.q);
    dk += dKw * c.w.unsqueeze(-1);

    // To the cumulative log decay cs: D_ij = exp(cs_i - cs_j), Γ_i = exp(cs_i),
    // w_j = exp(cs_{C-1} - cs_j); then g, whose suffix sums inside the chunk give cs's gradient.
    dgamma.select(-1, s.C - 1).add_(dglast);
    const auto Y = dZ * c.Z + dP * c.P;
    const auto ww = (dKw * c.k).sum(-1) * c.w;
    auto dcs = Y.sum(-1) - Y.sum(-2) + dgamma * c.gamma - ww;
    dcs.select(-1, s.C - 1).add_(ww.sum(-1));
    const auto dg = dcs.sum(-1, true) - dcs.cumsum(-1) + dcs;

    const double scale = 1.0 / std::sqrt(static_cast<double>(s.Dk));
    const auto dnq = to_key_heads(from_chunks(dq, s), s) * scale;
    const auto dnk = to_key_heads(from_chunks(dk, s), s);
    return {l2norm_backward(c.nq, c.rq, dnq).to(q_in.scalar_type()),
            l2norm_backward(c.nk, c.rk, dnk).to(k_in.scalar_type()),
            from_chunks(dv, s).to(v_in.scalar_type()),
            from_chunks3(dg, s).to(g_in.scalar_type()),
            from_chunks3(dbeta, s).to(beta_in.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// The per-token recurrence, batched over B·Hv (decoding: no chunk padding, no gradient).
GatedDeltaResult recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                           const at::Tensor& beta, const at::Tensor& starts, const at::Tensor& initial_state, bool want_state) {
  const Shape s = shape_of(q, v, 1);
  const auto opt = v.options().dtype(s.acc);
  const auto nq = to_value_heads(l2norm(q.to(s.acc)).first * (1.0 / std::sqrt(static_cast<double>(s.Dk))), s);
  const auto nk = to_value_heads(l2norm(k.to(s.acc)).first, s);
  const auto vv = v.to(s.acc), bb = beta.to(s.acc);
  auto factor = g.to(s.acc).exp();  // [B, T, Hv]: the decay, 0 where a document starts
  if (present(starts)) factor = factor.masked_fill(starts.to(at::kBool).unsqueeze(-1), 0.0);
  auto S = initial_or_zeros(initial_state, s, opt).clone().view({s.B * s.Hv, s.Dk, s.Dv});
  auto out = at::empty({s.B, s.T, s.Hv, s.Dv}, opt);
  for (std::int64_t t = 0; t < s.T; ++t) {
    S.mul_(factor.select(1, t).reshape({s.B * s.Hv, 1, 1}));
    const auto kt = nk.select(1, t).reshape({s.B * s.Hv, 1, s.Dk});
    const auto u = (vv.select(1, t).reshape({s.B * s.Hv, 1, s.Dv}) - at::bmm(kt, S)) * bb.select(1, t).reshape({s.B * s.Hv, 1, 1});
    S.baddbmm_(tr(kt), u);
    out.select(1, t).copy_(at::bmm(nq.select(1, t).reshape({s.B * s.Hv, 1, s.Dk}), S).view({s.B, s.Hv, s.Dv}));
  }
  GatedDeltaResult r;
  r.out = out.to(v.scalar_type());
  if (want_state) r.state = S.view({s.B, s.Hv, s.Dk, s.Dv});
  return r;
}

}  // namespace

bool gated_delta_kernel_applies(at::Device device) { return g_kernel_on.load() && gated_delta_cpu::serves(device, at::kFloat); }

void use_gated_delta_kernel(bool on) { g_kernel_on = on; }

GatedDeltaKernelBackward gated_delta_kernel_backward(std::int64_t key_heads, std::int64_t value_heads, std::int64_t key_dim,
                                                     std::int64_t value_dim, std::int64_t tokens, bool sixteen_bit, std::int64_t chunk) {
  const double Dk = static_cast<double>(key_dim), Dv = static_cast<double>(value_dim);
  const double rho = static_cast<double>(key_heads) / static_cast<double>(value_heads);
  const double repeated = key_heads < value_heads ? 1 : 0;
  // Given: nq, nk, q̂ (rho Dk each) and the two rsqrt factors; the kernel's dq, dk (Dk each), dv,
  // dg, dbeta. 16-bit inputs: fp32 v and beta.
  const double held = 3 * rho * Dk + 2 * rho + 2 * Dk + Dv + 2 + (sixteen_bit ? Dv + 1 : 0);
  GatedDeltaKernelBackward w;
  w.during = held;
  // The query's gradient: dq summed over its value heads (when repeated), scaled, and the L2
  // norm's four [.., Dk] temporaries and one sum, all alive until the norm returns.
  w.after = held + (repeated + 1) * rho * Dk + 4 * rho * Dk + rho;
  w.scratch_per_thread = gated_delta_cpu::backward_scratch_elements(tokens, key_dim, value_dim, chunk);
  return w;
}

double gated_delta_backward_elements(std::int64_t key_heads, std::int64_t value_heads, std::int64_t key_dim, std::int64_t value_dim,
                                     std::int64_t chunk) {
  const double Dk = static_cast<double>(key_dim), Dv = static_cast<double>(value_dim), C = static_cast<double>(chunk);
  const double rho = static_cast<double>(key_heads) / static_cast<double>(value_heads);
  return 2 * rho * Dk + 12 * Dk + 9 * Dv + 11 * C + 3 * Dk * Dv / C + 10;
}

GatedDeltaResult gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                                  const at::Tensor& beta, const at::Tensor& starts, const at::Tensor& initial_state,
                                  bool want_state, std::int64_t chunk) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) &&
                  v.size(2) % q.size(2) == 0,
              "gated delta rule: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " (expected q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], Hv % Hk == 0)");
  const std::vector<std::int64_t> bth = {v.size(0), v.size(1), v.size(2)};
  TORCH_CHECK(g.sizes() == at::IntArrayRef(bth) && beta.sizes() == at::IntArrayRef(bth), "gated delta rule: g ", g.sizes(), " and beta ", beta.sizes(), ", expected ",
              at::IntArrayRef(bth));
  TORCH_CHECK(!starts.defined() || starts.sizes() == at::IntArrayRef({q.size(0), q.size(1)}), "gated delta rule: starts ",
              starts.sizes(), ", expected [", q.size(0), ", ", q.size(1), "]");
  TORCH_CHECK(chunk > 0, "gated delta rule: chunk ", chunk, " must be positive");
  RECORD_USER_SCOPE(region::kAttention);
  GatedDeltaResult r;
  if (q.size(1) == 0) {
    r.out = at::zeros(v.sizes(), v.options());
    if (want_state) r.state = initial_or_zeros(initial_state, shape_of(q, v, 1), v.options().dtype(shape_of(q, v, 1).acc)).clone();
    return r;
  }
  const bool grad = at::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad() || g.requires_grad() || beta.requires_grad());
  if (!grad && q.size(1) <= kRecurrentMaxTokens) return recurrent(q, k, v, g, beta, starts, initial_state, want_state);
  auto outs = GatedDeltaFunction::apply(q, k, v, g, beta, given(starts), given(initial_state.defined() ? initial_state.detach() : initial_state), chunk);
  r.out = outs[0];
  if (want_state) r.state = outs[1];
  return r;
}

}  // namespace ctune::ops
