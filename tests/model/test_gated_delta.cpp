// The Gated DeltaNet core (ops/gated_delta.h) against references written here in another form:
// the gated delta rule as the per-token recurrence of its definition (outer products, one token
// at a time, float64, autograd for gradients), and the short convolution as shifted copies
// masked by document ids. Checked: the chunked forward and final state (T not a multiple of the
// chunk, Hv = 2 Hk, Dk != Dv, initial state, documents starting mid-chunk and on a chunk
// boundary); the hand-written backwards by finite differences and against the reference's
// autograd in fp32; packed rows against separate runs; bf16 inputs; incremental decoding.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "finite_difference.h"
#include "margins.h"
#include "ops/gated_delta.h"
#include "ops/tensor_pool.h"

namespace ctune {
namespace {

using test::kUnitRoundoffBf16;
using test::kUnitRoundoffFp32;
using test::within;

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }
// max |a - b| / max |b|
double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return max_abs(a.to(at::kDouble) - b.to(at::kDouble)) / max_abs(b.to(at::kDouble));
}
// |a - b| / |b| (Frobenius)
double norm_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}

// ---- references -------------------------------------------------------------------------------

// The definition, token by token: S ← 0 at a start; S ← exp(g) S; S ← S + k (β (v - Sᵀ k))ᵀ;
// o = Sᵀ q, with q, k unit rows (x / sqrt(sum x² + 1e-6), transformers' l2norm) and q / sqrt(Dk);
// value head h reads query/key head h / r. Works in the inputs' dtype, differentiable.
struct Recurrence {
  at::Tensor out, state;
};
Recurrence recurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                      const at::Tensor& starts, const at::Tensor& initial_state, double norm_eps = 1e-6) {
  const auto B = q.size(0), T = q.size(1), Hk = q.size(2), Dk = q.size(3), Hv = v.size(2), Dv = v.size(3);
  const auto head_of = at::arange(Hv, at::kLong).div(Hv / Hk, "floor");
  auto unit = [&](const at::Tensor& x) { return x / at::sqrt((x * x).sum(-1, true) + norm_eps); };
  const auto qn = unit(q).index_select(2, head_of) / std::sqrt(static_cast<double>(Dk));
  const auto kn = unit(k).index_select(2, head_of);
  at::Tensor S = initial_state.defined() ? initial_state.to(v.scalar_type()) : at::zeros({B, Hv, Dk, Dv}, v.options());
  std::vector<at::Tensor> outs;
  for (std::int64_t t = 0; t < T; ++t) {
    if (starts.defined()) S = S * starts.select(1, t).logical_not().to(v.scalar_type()).view({B, 1, 1, 1});
    S = S * g.select(1, t).exp().view({B, Hv, 1, 1});
    const auto kt = kn.select(1, t).unsqueeze(-1);  // [B, Hv, Dk, 1]
    const auto remembered = (S * kt).sum(-2);       // Sᵀ k: [B, Hv, Dv]
    const auto delta = beta.select(1, t).unsqueeze(-1) * (v.select(1, t) - remembered);
    S = S + kt * delta.unsqueeze(-2);
    outs.push_back((S * qn.select(1, t).unsqueeze(-1)).sum(-2));
  }
  return {at::stack(outs, 1), S};
}

// y[b,t,c] = silu(sum_j w[c, K-1-j] x[b, t-j, c]) over shifted copies of x behind the state
// (or zeros); a shifted input counts when its document id (the number of starts up to it; the
// state's is 0) equals t's.
at::Tensor conv_reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& starts, const at::Tensor& state) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  const auto prev = state.defined() ? state.to(x.scalar_type()).transpose(1, 2) : at::zeros({B, K - 1, C}, x.options());
  const auto xp = at::cat({prev, x}, 1);  // [B, K-1+T, C]
  const auto doc = starts.defined() ? starts.to(at::kLong).cumsum(1) : at::zeros({B, T}, at::kLong);
  const auto docp = at::cat({at::zeros({B, K - 1}, at::kLong), doc}, 1);
  at::Tensor acc = at::zeros_like(x);
  for (std::int64_t j = 0; j < K; ++j) {
    const auto same = docp.narrow(1, K - 1 - j, T).eq(doc).to(x.scalar_type()).unsqueeze(-1);
    acc = acc + xp.narrow(1, K - 1 - j, T) * w.select(1, K - 1 - j) * same;
  }
  return acc * at::sigmoid(acc);
}

// ---- inputs -------------------------------------------------------------------------------------

struct Inputs {
  at::Tensor q, k, v, g, beta, starts, state;
  std::vector<at::Tensor> list() const { return {q, k, v, g, beta}; }
};

// Random inputs in the model's ranges: g = -softplus(·)/2 <= 0, β = sigmoid(·).
Inputs make_inputs(std::int64_t B, std::int64_t T, std::int64_t Hk, std::int64_t Hv, std::int64_t Dk, std::int64_t Dv, std::uint64_t seed,
                   at::ScalarType dtype = at::kDouble) {
  at::manual_seed(seed);
  Inputs in;
  in.q = at::randn({B, T, Hk, Dk}, at::kDouble).to(dtype);
  in.k = at::randn({B, T, Hk, Dk}, at::kDouble).to(dtype);
  in.v = at::randn({B, T, Hv, Dv}, at::kDouble).to(dtype);
  in.g = (-at::softplus(at::randn({B, T, Hv}, at::kDouble)) * 0.5).to(dtype);
  in.beta = at::sigmoid(at::randn({B, T, Hv}, at::kDouble)).to(dtype);
  in.state = (at::randn({B, Hv, Dk, Dv}, at::kDouble) * 0.5).to(dtype == at::kDouble ? at::kDouble : at::kFloat);
  return in;
}

at::Tensor starts_at(std::int64_t B, std::int64_t T, const std::vector<std::vector<std::int64_t>>& rows) {
  auto s = at::zeros({B, T}, at::kBool);
  for (std::size_t b = 0; b < rows.size(); ++b)
    for (auto t : rows[b]) s[static_cast<std::int64_t>(b)][t] = true;
  return s;
}

std::vector<at::Tensor> leaves(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone().requires_grad_(true));
  return out;
}

// ---- 1. forward ---------------------------------------------------------------------------------

TEST(GatedDelta, ChunkedForwardMatchesTheRecurrenceInFloat64) {
  // T = 37 with chunk 16: two full chunks and a padded one. Row 0: documents start at 10 (mid
  // chunk) and 32 (a chunk boundary, 2·16); row 1: one document, then one starting at 16 (a
  // boundary) — and, with the initial state, row 1's first document reads it. Token 5 of row 1
  // has tiny q and k (|x|² ~ 1e-9 << 1e-6): its output depends on the l2norm's eps.
  // float64: both forms round at u = 1.1e-16 through O(T·D) operations; 1e-10 relative leaves
  // 1e4 of margin, and a wrong term moves the output by O(1e-2) or more.
  const std::int64_t B = 2, T = 37, Hk = 2, Hv = 4, Dk = 6, Dv = 5;
  Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 1);
  in.q[1][5].mul_(1e-5);
  in.k[1][5].mul_(1e-5);
  const auto starts = starts_at(B, T, {{10, 32}, {16}});
  for (const bool with_state : {false, true})
    for (const std::int64_t chunk : {16, 64, 5}) {
      const auto S0 = with_state ? in.state : at::Tensor();
      const auto ref = recurrence(in.q, in.k, in.v, in.g, in.beta, starts, S0);
      at::Tensor need_grad = in.q.clone().requires_grad_(true);  // the chunked path, not decoding's
      const auto ours = ops::gated_delta_rule(need_grad, in.k, in.v, in.g, in.beta, starts, S0, true, chunk);
      const std::string what = std::string(with_state ? "with" : "without") + " initial state, chunk " + std::to_string(chunk);
      EXPECT_TRUE(within(what + ": max |out - recurrence| / max |out|", max_rel(ours.out, ref.out), 1e-10));
      EXPECT_TRUE(within(what + ": max |state - recurrence| / max |state|", max_rel(ours.state, ref.state), 1e-10));
      EXPECT_EQ(ours.out.scalar_type(), at::kDouble);
      EXPECT_EQ(ours.state.sizes(), at::IntArrayRef({B, Hv, Dk, Dv}));
    }
  // The initial state is read (no row starts a document at 0): a negative control.
  const auto a = ops::gated_delta_rule(in.q.clone().requires_grad_(true), in.k, in.v, in.g, in.beta, starts, {}, false);
  const auto b = ops::gated_delta_rule(in.q.clone().requires_grad_(true), in.k, in.v, in.g, in.beta, starts, in.state, false);
  EXPECT_TRUE(test::beyond("initial state read: max |out with - without| / max |out|", max_rel(b.out, a.out), 1e-3));
  // The eps is transformers' 1e-6: with 1e-12 token 5's output moves far beyond the tolerance.
  const auto other_eps = recurrence(in.q, in.k, in.v, in.g, in.beta, starts, {}, 1e-12);
  const auto ours = ops::gated_delta_rule(in.q.clone().requires_grad_(true), in.k, in.v, in.g, in.beta, starts, {}, false);
  EXPECT_TRUE(test::beyond("l2norm eps 1e-12 instead of 1e-6: max |out - that| / max |out|", max_rel(ours.out, other_eps.out), 1e-4));
  EXPECT_FALSE(ours.state.defined());
}

TEST(GatedDelta, ShortConvolutionMatchesShiftedCopies) {
  // Documents start at 3 in row 0 (tokens 3.. read neither the state nor tokens 0..2) and at 0
  // and 6 in row 1 (the state is dropped). float64, a sum of K products: 1e-13.
  const std::int64_t B = 2, T = 9, C = 5, K = 4;
  at::manual_seed(3);
  const auto x = at::randn({B, T, C}, at::kDouble), w = at::randn({C, K}, at::kDouble);
  const auto state = at::randn({B, C, K - 1}, at::kDouble);
  const auto starts = starts_at(B, T, {{3}, {0, 6}});
  for (const bool with_state : {false, true})
    for (const bool with_starts : {false, true}) {
      const auto st = with_starts ? starts : at::Tensor();
      const auto S0 = with_state ? state : at::Tensor();
      const std::string what = std::string(with_state ? "state" : "no state") + (with_starts ? ", starts" : ", one document");
      EXPECT_TRUE(within(what + ": max |y - reference| / max |y|",
                         max_rel(ops::causal_conv1d_silu(x, w, st, S0), conv_reference(x, w, st, S0)), 1e-13));
    }
  // fp32 and bf16 inputs come back in their dtype, computed in fp32 (one rounding for bf16).
  const auto xb = x.to(at::kBFloat16);
  const auto yb = ops::causal_conv1d_silu(xb, w.to(at::kBFloat16), starts, state.to(at::kBFloat16));
  EXPECT_EQ(yb.scalar_type(), at::kBFloat16);
  const auto ref = conv_reference(xb.to(at::kDouble), w.to(at::kBFloat16).to(at::kDouble), starts, state.to(at::kBFloat16).to(at::kDouble));
  EXPECT_TRUE(within("bf16: max |y - reference| / max |y|", max_rel(yb, ref), 2 * kUnitRoundoffBf16));
}

// ---- 2. finite differences ------------------------------------------------------------------------

TEST(GatedDelta, GradientsMatchFiniteDifferences) {
  // float64, central differences with h = 1e-6 (tests/support/finite_difference.h): truncation
  // h² |f'''| / 6 ~ 1e-12, rounding ~ u64 |f| / h ~ 1e-9 for |f| ~ 10. Tolerance 1e-7 absolute on
  // gradients of order 1; a wrong term is O(0.1). Chunk 4 over T = 11: documents start at 3
  // (mid chunk) and 8 (a boundary); the loss reads the output and the final state.
  const std::int64_t B = 1, T = 11, Hk = 1, Hv = 2, Dk = 3, Dv = 2;
  const Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 2);
  const auto starts = starts_at(B, T, {{3, 8}});
  auto x = leaves(in.list());
  at::manual_seed(20);
  const auto w_out = at::randn({B, T, Hv, Dv}, at::kDouble), w_state = at::randn({B, Hv, Dk, Dv}, at::kDouble);
  auto loss = [&] {
    const auto r = ops::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], starts, in.state, true, 4);
    return (r.out * w_out).sum() + (r.state * w_state).sum();
  };
  loss().backward();
  const char* names[] = {"q", "k", "v", "g", "beta"};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double worst = test::worst_finite_difference([&] { return loss().item<double>(); }, {x[i]});
    EXPECT_TRUE(within(std::string("d") + names[i] + ": max |finite difference - backward|", worst, 1e-7));
  }
}

TEST(GatedDelta, ShortConvolutionGradientsMatchFiniteDifferences) {
  // As above (float64, h = 1e-6, 1e-7), with a start mid-row and the state read by row 1.
  const std::int64_t B = 2, T = 9, C = 3, K = 4;
  at::manual_seed(4);
  auto x = at::randn({B, T, C}, at::kDouble).requires_grad_(true), w = at::randn({C, K}, at::kDouble).requires_grad_(true);
  const auto state = at::randn({B, C, K - 1}, at::kDouble), w_out = at::randn({B, T, C}, at::kDouble);
  const auto starts = starts_at(B, T, {{4}, {}});
  auto loss = [&] { return (ops::causal_conv1d_silu(x, w, starts, state) * w_out).sum(); };
  loss().backward();
  EXPECT_TRUE(within("dx: max |finite difference - backward|",
                     test::worst_finite_difference([&] { return loss().item<double>(); }, {x}), 1e-7));
  EXPECT_TRUE(within("dweight: max |finite difference - backward|",
                     test::worst_finite_difference([&] { return loss().item<double>(); }, {w}), 1e-7));
}

// ---- 3. fp32 against the float64 recurrence's autograd ------------------------------------------

// The outputs and gradients of sum(out · w_out) + sum(state · w_state) under `run`.
using Run = std::function<Recurrence(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> outputs_and_grads(const Run& run, const std::vector<at::Tensor>& inputs, const at::Tensor& w_out,
                                          const at::Tensor& w_state) {
  auto x = leaves(inputs);
  const auto r = run(x);
  const auto l = (r.out.to(at::kDouble) * w_out).sum() + (r.state.to(at::kDouble) * w_state).sum();
  auto g = torch::autograd::grad({l}, x);
  std::vector<at::Tensor> all = {r.out.detach(), r.state.detach()};
  all.insert(all.end(), g.begin(), g.end());
  return all;
}

const char* kNames[] = {"out", "state", "dq", "dk", "dv", "dg", "dbeta"};

// On the CPU the fp32 call runs the per-head kernel (ops/gated_delta_cpu.h); a second shape
// with the model's chunk and wider heads runs its GEMMs at their usual sizes.
struct Fp32Case {
  std::int64_t B, T, Hk, Hv, Dk, Dv, chunk;
  std::vector<std::vector<std::int64_t>> starts;
};

class GatedDeltaFp32 : public ::testing::TestWithParam<Fp32Case> {};

INSTANTIATE_TEST_SUITE_P(Shapes, GatedDeltaFp32,
                         ::testing::Values(Fp32Case{2, 37, 2, 4, 8, 6, 16, {{10, 32}, {16}}},
                                           Fp32Case{1, 150, 1, 2, 64, 32, ops::kGatedDeltaChunk, {{70}}}));

TEST_P(GatedDeltaFp32, GradientsMatchTheFloat64Recurrence) {
  const auto [B, T, Hk, Hv, Dk, Dv, chunk, starts_list] = GetParam();
  const Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 5, at::kFloat);
  const auto starts = starts_at(B, T, starts_list);
  at::manual_seed(21);
  const auto w_out = at::randn({B, T, Hv, Dv}, at::kDouble), w_state = at::randn({B, Hv, Dk, Dv}, at::kDouble);
  auto ours = outputs_and_grads(
      [&](const std::vector<at::Tensor>& x) {
        const auto r = ops::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], starts, in.state, true, chunk);
        return Recurrence{r.out, r.state};
      },
      in.list(), w_out, w_state);
  auto reference = [&](const std::vector<at::Tensor>& x) {
    return recurrence(x[0], x[1], x[2], x[3], x[4], starts, in.state.to(x[0].scalar_type()));
  };
  std::vector<at::Tensor> in64;
  for (const auto& t : in.list()) in64.push_back(t.to(at::kDouble));
  const auto ref = outputs_and_grads(reference, in64, w_out, w_state);
  // The float32 noise of this computation (docs/testing.md): the recurrence itself evaluated in
  // float32 on inputs moved by one ulp at random, its RMS relative distance from float64 over
  // four draws, per output. The chunked form performs other float32 operations on the same
  // values, so its distance is one more sample of that size (ratio measured below 1.5); the
  // tolerance is kNoiseFactor times it.
  std::vector<double> noise(ref.size(), 0.0);
  for (int draw = 0; draw < 4; ++draw) {
    std::vector<at::Tensor> moved;
    for (const auto& t : in.list()) {
      const auto ulp = at::nextafter(t, at::full_like(t, INFINITY)) - t;
      moved.push_back(t + ulp * (at::randint(0, 2, t.sizes(), t.options()) * 2 - 1));
    }
    const auto f32 = outputs_and_grads(reference, moved, w_out, w_state);
    for (std::size_t i = 0; i < ref.size(); ++i) noise[i] += std::pow(norm_rel(f32[i], ref[i]), 2) / 4;
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(ours[i].scalar_type(), at::kFloat) << kNames[i];
    EXPECT_TRUE(within(std::string(kNames[i]) + ": |fp32 chunked - float64| / |float64|", norm_rel(ours[i], ref[i]),
                       test::noise_tolerance(std::sqrt(noise[i]))));
  }
}

// ---- 4. packing ------------------------------------------------------------------------------------

TEST(GatedDelta, PackedDocumentsMatchSeparateRuns) {
  // Documents of 21 and 27 tokens packed in one row of 48 (chunk 16: the second starts mid
  // chunk 1) against each run alone in its own row (from token 0, chunks aligned differently):
  // the outputs, the final state (the second document's) and every gradient of each slice agree
  // within fp32 rounding. Both runs are fp32 evaluations of the same values, each within the
  // float32 noise of the float64 result; that noise (measured as in the test above, here at
  // most 3e-7 relative) with kNoiseFactor, twice: 2 · 8 · 4e-7 ~ 6.4e-6; a leak across the
  // boundary moves the second document by O(1).
  const std::int64_t La = 21, Lb = 27, T = La + Lb, Hk = 1, Hv = 2, Dk = 8, Dv = 6;
  const Inputs in = make_inputs(1, T, Hk, Hv, Dk, Dv, 6, at::kFloat);
  const auto starts = starts_at(1, T, {{0, La}});
  at::manual_seed(22);
  const auto w_out = at::randn({1, T, Hv, Dv}, at::kDouble), w_state = at::randn({1, Hv, Dk, Dv}, at::kDouble);
  auto run = [&](const std::vector<at::Tensor>& x, const at::Tensor& st) {
    const auto r = ops::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], st, {}, true, 16);
    return Recurrence{r.out, r.state};
  };
  const auto packed = outputs_and_grads([&](const std::vector<at::Tensor>& x) { return run(x, starts); }, in.list(), w_out, w_state);
  const double tol = 2 * test::noise_tolerance(4e-7);
  for (const bool second : {false, true}) {
    const std::int64_t t0 = second ? La : 0, L = second ? Lb : La;
    std::vector<at::Tensor> slice;
    for (const auto& t : in.list()) slice.push_back(t.narrow(1, t0, L).contiguous());
    // The state's weight counts only for the document that ends the row.
    const auto alone = outputs_and_grads([&](const std::vector<at::Tensor>& x) { return run(x, at::Tensor()); }, slice,
                                         w_out.narrow(1, t0, L), second ? w_state : at::zeros_like(w_state));
    const std::string doc = second ? "second document" : "first document";
    for (std::size_t i = 0; i < alone.size(); ++i) {
      if (i == 1 && !second) continue;  // the first document's state is not the row's
      const auto mine = i == 1 ? packed[i] : packed[i].narrow(1, t0, L);
      EXPECT_TRUE(within(doc + ", " + kNames[i] + ": |packed - alone| / |alone|", norm_rel(mine, alone[i]), tol));
    }
  }
  // The short convolution too (fp32, K = 4): a sum of 4 products, a few roundings: 8 u.
  at::manual_seed(23);
  const auto x = at::randn({1, T, 7}), w = at::randn({7, 4});
  auto xl = x.clone().requires_grad_(true), wl = w.clone().requires_grad_(true);
  const auto wy = at::randn({1, T, 7});
  const auto y = ops::causal_conv1d_silu(xl, wl, starts);
  const auto gp = torch::autograd::grad({(y * wy).sum()}, {xl, wl});
  at::Tensor dw_alone = at::zeros_like(w);
  for (const bool second : {false, true}) {
    const std::int64_t t0 = second ? La : 0, L = second ? Lb : La;
    auto xs = x.narrow(1, t0, L).contiguous().requires_grad_(true), ws = w.clone().requires_grad_(true);
    const auto ys = ops::causal_conv1d_silu(xs, ws, {});
    const auto gs = torch::autograd::grad({(ys * wy.narrow(1, t0, L)).sum()}, {xs, ws});
    dw_alone += gs[1];
    EXPECT_TRUE(within("conv y: max |packed - alone| / max", max_rel(y.narrow(1, t0, L), ys), 8 * kUnitRoundoffFp32));
    EXPECT_TRUE(within("conv dx: max |packed - alone| / max", max_rel(gp[0].narrow(1, t0, L), gs[0]), 8 * kUnitRoundoffFp32));
  }
  EXPECT_TRUE(within("conv dweight: packed vs the sum of the runs alone", max_rel(gp[1], dw_alone), 64 * kUnitRoundoffFp32));
}

// ---- 5. bf16 -----------------------------------------------------------------------------------------

TEST(GatedDelta, Bf16InputsGiveTheFp32ResultRoundedOnce) {
  // bf16 inputs are computed in fp32: against the fp32 run on the same (bf16) values the output
  // and each gradient differ by their final rounding to bf16 alone (the output weights are bf16
  // values, so both backwards start from the same dO), at most u_bf16 of each element; 1.01 u_bf16 of max |x| allowed. The state stays fp32 (and equals the
  // fp32 run's).
  const std::int64_t B = 2, T = 37, Hk = 2, Hv = 4, Dk = 8, Dv = 6;
  const Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 7, at::kBFloat16);
  const auto starts = starts_at(B, T, {{10, 32}, {16}});
  at::manual_seed(24);
  const auto w_out = at::randn({B, T, Hv, Dv}, at::kDouble).to(at::kBFloat16).to(at::kDouble), w_state = at::randn({B, Hv, Dk, Dv}, at::kDouble);
  auto run = [&](const std::vector<at::Tensor>& x) {
    const auto r = ops::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], starts, in.state, true, 16);
    return Recurrence{r.out, r.state};
  };
  const auto bf16 = outputs_and_grads(run, in.list(), w_out, w_state);
  std::vector<at::Tensor> f32_in;
  for (const auto& t : in.list()) f32_in.push_back(t.to(at::kFloat));
  const auto f32 = outputs_and_grads(run, f32_in, w_out, w_state);
  for (std::size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_EQ(bf16[i].scalar_type(), i == 1 ? at::kFloat : at::kBFloat16) << kNames[i];
    EXPECT_TRUE(within(std::string("bf16 ") + kNames[i] + ": max |bf16 - fp32| / max |fp32|", max_rel(bf16[i], f32[i]),
                       1.01 * kUnitRoundoffBf16));
  }
}

// ---- 6. decoding -------------------------------------------------------------------------------------

TEST(GatedDelta, DecodingStepByStepMatchesTheFullSequence) {
  // A prefix of 20 tokens through the chunked form (final state) and the conv (conv_state_after),
  // then T = 1 steps from those states (the recurrent path), against the full sequence's
  // positions. float64: 1e-10 as in the forward test; fp32: two fp32 forms of the same values,
  // 2 · 8 · the forward's noise (~2e-7): 4e-6.
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const std::int64_t B = 2, T = 29, T0 = 20, Hk = 1, Hv = 2, Dk = 8, Dv = 6, C = 5, K = 4;
    const Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 8, dtype);
    const double tol = dtype == at::kDouble ? 1e-10 : 4e-6;
    const std::string name = dtype == at::kDouble ? "float64" : "fp32";
    at::NoGradGuard no_grad;
    at::manual_seed(25);
    const auto x = at::randn({B, T, C}, at::kDouble).to(dtype), w = at::randn({C, K}, at::kDouble).to(dtype);
    const auto y_full = ops::causal_conv1d_silu(x, w, {});
    const auto full = ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, {}, {}, true, 8);
    auto slice = [](const at::Tensor& t, std::int64_t t0, std::int64_t n) { return t.narrow(1, t0, n).contiguous(); };
    auto conv_state = ops::conv_state_after(slice(x, 0, T0), {}, K);
    EXPECT_EQ(conv_state.sizes(), at::IntArrayRef({B, C, K - 1}));
    auto state = ops::gated_delta_rule(slice(in.q, 0, T0), slice(in.k, 0, T0), slice(in.v, 0, T0), slice(in.g, 0, T0),
                                       slice(in.beta, 0, T0), {}, {}, true, 8)
                     .state;
    double conv_worst = 0, delta_worst = 0;
    for (std::int64_t t = T0; t < T; ++t) {
      const auto xt = slice(x, t, 1);
      conv_worst = std::max(conv_worst, max_rel(ops::causal_conv1d_silu(xt, w, {}, conv_state), slice(y_full, t, 1)));
      conv_state = ops::conv_state_after(xt, conv_state, K);
      const auto step = ops::gated_delta_rule(slice(in.q, t, 1), slice(in.k, t, 1), slice(in.v, t, 1), slice(in.g, t, 1),
                                              slice(in.beta, t, 1), {}, state, true);
      delta_worst = std::max(delta_worst, max_rel(step.out, slice(full.out, t, 1)));
      state = step.state;
    }
    EXPECT_TRUE(within(name + " conv: max over steps of max |step - full| / max", conv_worst, tol));
    EXPECT_TRUE(within(name + " delta rule: max over steps of max |step - full| / max", delta_worst, tol));
    EXPECT_TRUE(within(name + " delta rule: final state, steps vs full", max_rel(state, full.state), tol));
    // conv_state_after with fewer than K-1 new inputs keeps the older ones.
    const auto two = ops::conv_state_after(slice(x, T0, 2), ops::conv_state_after(slice(x, 0, T0), {}, K), K);
    EXPECT_TRUE(at::equal(two, slice(x, T0 - 1, 3).transpose(1, 2)));
  }
}

TEST(GatedDelta, RecurrentPathMatchesTheChunkedPathWithStarts) {
  // T = 7 without gradients takes the per-token path; with q requiring grad, the chunked one.
  // Starts at 0 (the initial state is dropped) in row 0 and at 3 in row 1. float64, 1e-10.
  const std::int64_t B = 2, T = 7, Hk = 2, Hv = 4, Dk = 5, Dv = 3;
  const Inputs in = make_inputs(B, T, Hk, Hv, Dk, Dv, 9);
  const auto starts = starts_at(B, T, {{0, 4}, {3}});
  ASSERT_LE(T, ops::kRecurrentMaxTokens);
  const auto chunked = ops::gated_delta_rule(in.q.clone().requires_grad_(true), in.k, in.v, in.g, in.beta, starts, in.state, true, 4);
  at::NoGradGuard no_grad;
  const auto step = ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, starts, in.state, true, 4);
  EXPECT_TRUE(within("out: max |recurrent - chunked| / max", max_rel(step.out, chunked.out), 1e-10));
  EXPECT_TRUE(within("state: max |recurrent - chunked| / max", max_rel(step.state, chunked.state), 1e-10));
}

// The backward's peak beyond what it was given is what the memory ledger states for it: the
// tensor pool's live peak during backward, less what was live before, on the quickstart's shape
// and three others (Hk < Hv, Dk != Dv, T not a multiple of the chunk), for the per-head kernel
// (ops::gated_delta_kernel_backward: the larger of its two moments, the scratch counted for the
// threads that run) and the batched form (ops::gated_delta_backward_elements, per padded token
// and value head). The counts are of the code's tensors; what the pool does not see (blocks under
// 256 KiB, kept by glibc) and its page rounding make the few percent.
double measured_backward_bytes(std::int64_t B, std::int64_t T, std::int64_t Hk, std::int64_t Hv, std::int64_t Dk, std::int64_t Dv) {
  ops::TensorPoolScope pool;
  auto q = at::randn({B, T, Hk, Dk}).requires_grad_(true), k = at::randn({B, T, Hk, Dk}).requires_grad_(true);
  auto v = at::randn({B, T, Hv, Dv}).requires_grad_(true);
  auto g = (-at::softplus(at::randn({B, T, Hv})) * 0.5).detach().requires_grad_(true);
  auto beta = at::sigmoid(at::randn({B, T, Hv})).detach().requires_grad_(true);
  const auto grad = at::randn({B, T, Hv, Dv});
  const auto r = ops::gated_delta_rule(q, k, v, g, beta, {}, {}, false);
  ops::release_free_memory();  // the peak restarts from what is live now
  const auto before = ops::tensor_pool_stats().live_bytes;
  const auto grads = torch::autograd::grad({r.out}, {q, k, v, g, beta}, {grad});
  return static_cast<double>(ops::tensor_pool_stats().peak_live_bytes - before);
}

TEST(GatedDelta, BackwardWorkspaceIsWhatTheLedgerStates) {
  const std::vector<std::array<std::int64_t, 6>> shapes = {
      {16, 256, 4, 8, 32, 32}, {2, 256, 2, 8, 64, 32}, {2, 512, 4, 4, 32, 128}, {3, 400, 4, 8, 32, 32}};
  const bool kernel = ops::gated_delta_kernel_applies(at::kCPU);
  for (const bool batched : {false, true}) {
    if (!batched && !kernel) continue;  // a build without oneDNN runs the batched form only
    ops::use_gated_delta_kernel(!batched);
    for (const auto& [B, T, Hk, Hv, Dk, Dv] : shapes) {
      const double measured = measured_backward_bytes(B, T, Hk, Hv, Dk, Dv);
      const double n_heads = static_cast<double>(B * T * Hv);
      double stated = 0;
      if (batched) {
        const std::int64_t padded = (T + ops::kGatedDeltaChunk - 1) / ops::kGatedDeltaChunk * ops::kGatedDeltaChunk;
        stated = 4.0 * static_cast<double>(B * padded * Hv) * ops::gated_delta_backward_elements(Hk, Hv, Dk, Dv);
      } else {
        const auto w = ops::gated_delta_kernel_backward(Hk, Hv, Dk, Dv, T, false);
        const double threads = static_cast<double>(std::min<std::int64_t>(at::get_num_threads(), B * Hv));
        stated = 4.0 * std::max(n_heads * w.after, n_heads * w.during + threads * static_cast<double>(w.scratch_per_thread));
      }
      const std::string name = std::string(batched ? "batched" : "kernel") + ", B " + std::to_string(B) + " T " + std::to_string(T) +
                               " Hk " + std::to_string(Hk) + " Hv " + std::to_string(Hv) + " Dk " + std::to_string(Dk) + " Dv " +
                               std::to_string(Dv);
      EXPECT_TRUE(within(name + ": |measured / stated - 1|", std::abs(measured / stated - 1.0), 0.05))
          << "measured " << measured << " bytes, stated " << stated;
    }
  }
  ops::use_gated_delta_kernel(true);
}

}  // namespace
}  // namespace ctune

