// The blocked attention kernel (ops/attention.h) against the textbook graph: the same output and
// the same gradients of q, k and v in float64, for every mask the model builds (causal over
// several blocks with a partial last one, packed documents, left padding, a KV cache's longer
// keys, a sliding window) and grouped-query heads, with and without Gemma 2's soft-cap; the
// tiled CPU form in fp32 and bf16 against float64; and the backward of the blocked and
// recomputed kernels against finite differences, soft-capped too. Attention sinks (gpt-oss):
// every kernel against the materialized graph with the sink as one more softmax column, in
// float64 on every mask, in fp32 and bf16 against float64, and the sink's gradient against
// finite differences.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "model/attention.h"
#include "ops/attention.h"
#include "ops/attention_tiled.h"
#include "ops/cpu_gemm.h"
#include "finite_difference.h"
#include "margins.h"

namespace ctune {
namespace {

using test::within;
using test::worst_finite_difference;

struct Case {
  const char* name;
  std::int64_t B, h, hkv, Tq, Tk;
  at::Tensor mask;
};

std::vector<Case> cases() {
  const auto opt = at::TensorOptions().dtype(at::kLong);
  std::vector<Case> out;
  // Causal over 300 queries: blocks of 128, 128 and 44, each seeing keys up to its end.
  out.push_back({"causal", 2, 6, 2, 300, 300, model::build_attention_mask(2, 300, 300, {}, {}, at::kCPU)});
  // Packed rows: documents of 100, 90, 140 tokens in row 0 and 20, 250 (then padding) in row 1.
  auto seg = at::zeros({2, 300}, opt);
  seg[0].narrow(0, 0, 100).fill_(1), seg[0].narrow(0, 100, 90).fill_(2), seg[0].narrow(0, 190, 110).fill_(3);
  seg[1].narrow(0, 0, 20).fill_(1), seg[1].narrow(0, 20, 250).fill_(2);
  out.push_back({"packed", 2, 4, 4, 300, 300, model::build_attention_mask(2, 300, 300, {}, seg, at::kCPU)});
  // Left padding (generation's prompt batch), with queries that see no key at all.
  auto keys = at::ones({2, 140}, opt);
  keys[1].narrow(0, 0, 37).fill_(0);
  out.push_back({"left padded", 2, 6, 3, 140, 140, model::build_attention_mask(2, 140, 140, keys, {}, at::kCPU)});
  // Decoding with a cache: 3 new queries over 200 keys.
  out.push_back({"cached", 1, 6, 1, 3, 200, model::build_attention_mask(1, 3, 200, {}, {}, at::kCPU)});
  // A window of 50 over 300 queries: blocks start their keys at the window's earliest edge.
  out.push_back({"windowed", 1, 4, 2, 300, 300, model::build_attention_mask(1, 300, 300, {}, {}, at::kCPU, 50)});
  return out;
}

// With sinks (ops/attention.h) the blocked kernel scales its sinkless rows and backs through the
// log-sum-exp with the sink in it, while the materialized graph appends the sink as one more
// softmax column and lets autograd differentiate it: the same output and gradients, the sinks'
// too; the recomputed kernel replays the materialized graph; the no-grad forward is the
// training one's.
TEST(Attention, BlockedEqualsMaterialized) {
  at::manual_seed(3);
  for (const bool with_sinks : {false, true})
  for (const double softcap : {0.0, 2.0})
  for (const Case& c : cases()) {
    const std::int64_t d = 8;
    auto q = at::randn({c.B, c.h, c.Tq, d}, at::kDouble).requires_grad_(true);
    auto k = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).requires_grad_(true);
    auto v = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).requires_grad_(true);
    auto sinks = with_sinks ? at::randn({c.h}, at::kDouble).requires_grad_(true) : at::Tensor();
    auto weights = at::randn({c.B, c.h, c.Tq, d}, at::kDouble);
    // Padding queries (nothing to attend) differ by design and no loss reads them: compare
    // the rows that see at least one key.
    auto live = c.mask.expand({c.B, 1, c.Tq, c.Tk}).any(-1, /*keepdim=*/true).to(at::kDouble);
    std::vector<at::Tensor> inputs = {q, k, v};
    if (with_sinks) inputs.push_back(sinks);
    std::vector<at::Tensor> outs, grads;
    for (auto kernel : {ops::AttentionKernel::materialized, ops::AttentionKernel::blocked, ops::AttentionKernel::recomputed}) {
      auto out = ops::attention_core(q, k, v, c.mask, 0.35, kernel, softcap, sinks);
      auto g = torch::autograd::grad({(out * weights * live).sum()}, inputs);
      outs.push_back(out * live);
      grads.insert(grads.end(), g.begin(), g.end());
    }
    {
      at::NoGradGuard no_grad;
      outs.push_back(ops::attention_core(q, k, v, c.mask, 0.35, ops::AttentionKernel::blocked, softcap, sinks) * live);
    }
    // float64 throughout: the kernels differ only in summation order (~1e-15 relative).
    const std::string name = std::string(c.name) + (softcap > 0 ? " soft-capped" : "") + (with_sinks ? " with sinks" : "");
    const std::size_t n = inputs.size();
    for (std::size_t kernel = 1; kernel <= 2; ++kernel) {
      const std::string which = kernel == 1 ? ": blocked " : ": recomputed ";
      EXPECT_TRUE(within(name + which + "output", (outs[0] - outs[kernel]).abs().max().item<double>(), 1e-12));
      for (std::size_t i = 0; i < n; ++i) {
        const char* what[] = {"dq", "dk", "dv", "dsinks"};
        EXPECT_TRUE(within(name + which + what[i], (grads[i] - grads[n * kernel + i]).abs().max().item<double>(), 1e-12));
      }
    }
    EXPECT_TRUE(within(name + ": blocked no-grad output", (outs[0] - outs[3]).abs().max().item<double>(), 1e-12));
  }
}

TEST(Attention, BlockedNoGradForwardEqualsItsTrainingForward) {
  at::manual_seed(4);
  const Case c = cases()[1];
  auto q = at::randn({c.B, c.h, c.Tq, 16});
  auto k = at::randn({c.B, c.hkv, c.Tk, 16});
  auto v = at::randn({c.B, c.hkv, c.Tk, 16});
  auto trained = ops::attention_core(q.requires_grad_(true), k, v, c.mask, 0.25, ops::AttentionKernel::blocked);
  at::NoGradGuard no_grad;
  auto plain = ops::attention_core(q.detach(), k, v, c.mask, 0.25, ops::AttentionKernel::blocked);
  EXPECT_TRUE(at::equal(trained.detach(), plain));
}

// Per head, the bound on dsinks' error that the blocked backward's rounded output brings: it
// takes each row's D_i = dO_i . O_i from the output in the input dtype (as FlashAttention's
// backward does), where ATen's graph differentiates the softmax with the unrounded sum, so
// dsinks = -sum_i p_i D_i (p_i the sink's probability) moves by sum_i,d p_i dO_id (O_id's rounding):
// each rounding error is at most u |O_id| (u the dtype's unit roundoff) and of either sign, so
// taken as uniform and independent the sum's standard deviation is
// u / sqrt(3) sqrt(sum_i,d (p_i dO_id O_id)^2); the bound is six of them (the worst case, u sum
// |p dO O|, is 200 times looser here and would pass a kernel off by a tenth). float64 from the
// inputs.
double rounded_output_bound(const at::Tensor& q, const at::Tensor& k, const at::Tensor& sinks, const at::Tensor& grad, const at::Tensor& out,
                            const at::Tensor& mask, const at::Tensor& live, double scale, double u) {
  const auto h = q.size(1);
  const auto keys = k.to(at::kDouble).repeat_interleave(h / k.size(1), 1);
  auto scores = at::matmul(q.to(at::kDouble), keys.transpose(-1, -2)) * scale;
  scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  const auto sink = sinks.to(at::kDouble).view({1, h, 1, 1}).expand({scores.size(0), h, scores.size(2), 1});
  const auto p = at::exp(sink - at::logsumexp(at::cat({scores, sink}, -1), -1, true)) * live;
  const auto terms = p * grad.to(at::kDouble) * out;  // [B, h, Tq, d]
  return 6.0 * u / std::sqrt(3.0) * terms.pow(2).sum({0, 2, 3}).sqrt().max().item<double>();
}

// Sinks in fp32 and bf16 (the tiled kernel where it runs, ops/attention_tiled.h) against float64:
// the error allowed as the tiled test's below, twice ATen's materialized graph's in the same
// dtype plus one fp32 dot product's bound, for the output and every gradient, the sinks' too;
// dsinks also the rounded output's bound (rounded_output_bound).
TEST(Attention, SinksInReducedPrecisionAreAsCloseAsAten) {
  at::manual_seed(14);
  for (const auto dtype : {at::kFloat, at::kBFloat16})
  for (const Case& c : cases()) {
    const std::int64_t d = 64;
    const double scale = 0.125, gamma_d = static_cast<double>(d) * std::ldexp(1.0, -24);
    auto live = c.mask.expand({c.B, 1, c.Tq, c.Tk}).any(-1, /*keepdim=*/true).to(at::kDouble);
    auto q = at::randn({c.B, c.h, c.Tq, d}, at::kDouble).to(dtype);
    auto k = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).to(dtype);
    auto v = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).to(dtype);
    auto sinks = at::randn({c.h}, at::kDouble).to(dtype);
    auto grad = (at::randn({c.B, c.h, c.Tq, d}, at::kDouble) * live).to(dtype);
    auto run = [&](at::ScalarType as, ops::AttentionKernel kernel) {  // out, dq, dk, dv, dsinks
      auto qa = q.to(as).requires_grad_(true), ka = k.to(as).requires_grad_(true), va = v.to(as).requires_grad_(true);
      auto sa = sinks.to(as).requires_grad_(true);
      auto out = ops::attention_core(qa, ka, va, c.mask, scale, kernel, 0, sa);
      auto g = torch::autograd::grad({out}, {qa, ka, va, sa}, {grad.to(as)});
      return std::vector<at::Tensor>{out.detach() * live, g[0], g[1], g[2], g[3]};
    };
    const auto ref = run(at::kDouble, ops::AttentionKernel::materialized);
    const auto aten = run(dtype, ops::AttentionKernel::materialized);
    const auto blocked = run(dtype, ops::AttentionKernel::blocked);
    const std::string name = std::string(c.name) + (dtype == at::kFloat ? " fp32" : " bf16") + " with sinks";
    const char* what[] = {"output", "dq", "dk", "dv", "dsinks"};
    for (int i = 0; i < 5; ++i) {
      const double err_aten = (aten[i].to(at::kDouble) - ref[i]).abs().max().item<double>();
      const double err_blocked = (blocked[i].to(at::kDouble) - ref[i]).abs().max().item<double>();
      double floor = gamma_d * ref[i].abs().max().item<double>();
      if (i == 4) floor += rounded_output_bound(q, k, sinks, grad, ref[0], c.mask, live, scale, dtype == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8));
      EXPECT_TRUE(within(name + ": " + what[i] + " |blocked - float64| (ATen's " + std::to_string(err_aten) + ")", err_blocked,
                         2 * err_aten + floor));
    }
  }
}

// The tiled kernel (ops/attention_tiled.h: fp32 and bf16 on the CPU; bf16 tiles widened to fp32
// where the CPU has no bf16 GEMM, ops/cpu_gemm.h) against float64, output
// and gradients, on every mask above. Its error is set against the error the same rounded
// inputs get from ATen's textbook graph in the same dtype: the dtype's own noise on this
// computation. Both round each product sum, exp and normalisation at most once to the dtype;
// the tiled kernel keeps scores, dP and the dK/dV sums in fp32 where ATen's bf16 matmuls round
// them, and sums in another order: allowed twice ATen's error, plus the bound of one fp32 dot
// product over d terms, γ_d ≈ d · 2^-24 of the largest reference value (the tiles' GEMMs
// accumulate in fp32 whatever the dtype; where ATen's own error is as small as that, the two
// summation orders alone set the difference). A wrong term is O(1) relative.
TEST(Attention, TiledKernelIsAsCloseToFloat64AsAtenInTheSameDtype) {
  if (!ops::cpu_gemm::available()) GTEST_SKIP() << "built without oneDNN: no tiled kernel";
  at::manual_seed(5);
  for (const auto dtype : {at::kFloat, at::kBFloat16})
  for (const double softcap : {0.0, 2.0})
  for (const Case& c : cases()) {
    const std::int64_t d = 64;
    const double scale = 0.125, gamma_d = static_cast<double>(d) * std::ldexp(1.0, -24);
    auto live = c.mask.expand({c.B, 1, c.Tq, c.Tk}).any(-1, /*keepdim=*/true).to(at::kDouble);
    // Inputs and the output's gradient rounded to the dtype once, then exact in float64.
    auto q = at::randn({c.B, c.h, c.Tq, d}, at::kDouble).to(dtype);
    auto k = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).to(dtype);
    auto v = at::randn({c.B, c.hkv, c.Tk, d}, at::kDouble).to(dtype);
    auto grad = (at::randn({c.B, c.h, c.Tq, d}, at::kDouble) * live).to(dtype);

    auto graph = [&](at::ScalarType as) {  // ATen's materialized graph in `as`: out, dq, dk, dv
      auto qa = q.to(as).requires_grad_(true), ka = k.to(as).requires_grad_(true), va = v.to(as).requires_grad_(true);
      auto out = ops::attention_core(qa, ka, va, c.mask, scale, ops::AttentionKernel::materialized, softcap);
      auto g = torch::autograd::grad({out}, {qa, ka, va}, {grad.to(as)});
      return std::vector<at::Tensor>{out.detach() * live, g[0], g[1], g[2]};
    };
    const auto ref = graph(at::kDouble), aten = graph(dtype);
    at::Tensor lse;
    auto out = ops::tiled_attention_forward(q, k, v, c.mask, scale, softcap, &lse);
    auto g = ops::tiled_attention_backward(q, k, v, c.mask, lse, grad, scale, softcap);
    const std::vector<at::Tensor> tiled = {out * live, g.dq, g.dk, g.dv};
    const std::string name = std::string(c.name) + (dtype == at::kFloat ? " fp32" : " bf16") + (softcap > 0 ? " soft-capped" : "");
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      const double err_aten = (aten[i].to(at::kDouble) - ref[i]).abs().max().item<double>();
      const double err_tiled = (tiled[i].to(at::kDouble) - ref[i]).abs().max().item<double>();
      const double floor = gamma_d * ref[i].abs().max().item<double>();
      EXPECT_TRUE(within(name + ": " + what[i] + " |tiled - float64| (ATen's " + std::to_string(err_aten) + ")", err_tiled,
                         2 * err_aten + floor));
    }
  }
}

// The custom autograd functions' backward (blocked's hand-written one, recomputed's replay)
// against central finite differences (float64), over two blocks with a packed mask and two
// query heads per KV head.
class AttentionBackward : public ::testing::TestWithParam<ops::AttentionKernel> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  // Scores scale·q·k ~ 0.7·N(0, 3): a cap of 1.5 bends most of them (tanh well past linear).
  // Sinks of ~N(0, 1) take a share of every row comparable to its keys', so a wrong sink term
  // (in any of dq, dk, dv or the sink's own gradient) is O(1).
  for (const bool sinks : {false, true})
  for (const double softcap : {0.0, 1.5}) {
  at::manual_seed(8);
  const std::int64_t T = ops::kBlockQueries + 5, d = 3;
  auto seg = at::ones({1, T}, at::kLong);
  seg[0].narrow(0, 60, T - 60).fill_(2);
  auto mask = model::build_attention_mask(1, T, T, {}, seg, at::kCPU);
  auto q = at::randn({1, 4, T, d}, at::kDouble).requires_grad_(true);
  auto k = at::randn({1, 2, T, d}, at::kDouble).requires_grad_(true);
  auto v = at::randn({1, 2, T, d}, at::kDouble).requires_grad_(true);
  auto s = sinks ? at::randn({4}, at::kDouble).requires_grad_(true) : at::Tensor();
  auto weights = at::randn({1, 4, T, d}, at::kDouble);
  auto f = [&] {
    at::NoGradGuard no_grad;
    return (ops::attention_core(q, k, v, mask, 0.7, GetParam(), softcap, s) * weights).sum().item<double>();
  };
  (ops::attention_core(q, k, v, mask, 0.7, GetParam(), softcap, s) * weights).sum().backward();
  std::vector<at::Tensor> inputs = {q, k, v};
  if (sinks) inputs.push_back(s);
  // Every 7th element: all 3,000-odd would take seconds (the 4 sinks: 0 and 7 past the end, so
  // the sink's own check is the stride-1 one below).
  double worst = worst_finite_difference(f, inputs, 7);
  if (sinks) worst = std::max(worst, worst_finite_difference(f, {s}, 1));
  // Central differences in float64, eps = 1e-6: truncation ~1e-12, rounding ~ u64 |f| / eps
  // ~ 1e-9 for |f| ~ 30; a wrong backward term is O(1).
  EXPECT_TRUE(within(std::string(sinks ? "sinks, " : "") + "softcap " + std::to_string(softcap) +
                         ": max |finite difference - gradient|", worst, 1e-7));
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionBackward,
                         ::testing::Values(ops::AttentionKernel::blocked, ops::AttentionKernel::recomputed),
                         [](const auto& info) {
                           return std::string(info.param == ops::AttentionKernel::blocked ? "blocked" : "recomputed");
                         });

}  // namespace
}  // namespace ctune
