// The chunked cross-entropy's custom backward against central finite differences (float64) and
// against the plain full-logits loss, with several chunks and a partial last one, plain and
// with Gemma 2's final soft-cap.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "train/step/chunked_loss.h"
#include "finite_difference.h"
#include "margins.h"

using namespace ctune;
using ctune::test::within;
using ctune::test::worst_finite_difference;

namespace {

at::Tensor plain_loss(const at::Tensor& h, const at::Tensor& w, const at::Tensor& t) {
  return at::nll_loss(at::log_softmax(at::matmul(h, w.t()), -1), t, {}, at::Reduction::Sum);
}

// Logits here are ~N(0, 5): a cap of 2 bends nearly all of them.
class ChunkedLossCap : public ::testing::TestWithParam<double> {};

TEST_P(ChunkedLossCap, GradientsMatchFiniteDifferences) {
  const double cap = GetParam();
  at::manual_seed(3);
  auto h = at::randn({7, 5}, at::kDouble).requires_grad_(true);
  auto w = at::randn({11, 5}, at::kDouble).requires_grad_(true);
  auto t = at::randint(0, 11, {7}, at::kLong);
  auto f = [&] {
    return 1.7 * train::chunked_cross_entropy_sum(h.detach(), w.detach(), t, 3, at::ScalarType::Undefined, cap).item<double>();
  };
  auto loss = train::chunked_cross_entropy_sum(h, w, t, /*chunk_rows=*/3, at::ScalarType::Undefined, cap);  // chunks of 3, 3, 1
  (loss * 1.7).backward();  // a non-unit incoming gradient
  const double worst = worst_finite_difference(f, {h, w});
  // Central differences in float64 with eps = 1e-6: truncation eps^2 |f'| / 6 ~ 1e-12, rounding
  // ~ (roundings on a path) u64 |f| / eps ~ 30 * 1e-16 * 30 / 1e-6 ~ 1e-7 at worst (|f| ~ 30);
  // a wrong term in the backward is O(1).
  EXPECT_TRUE(within("max |finite difference - gradient|", worst, 1e-6));
  if (cap > 0) {  // the capped forward is the capped plain loss
    const auto capped = at::tanh(at::matmul(h, w.t()) / cap) * cap;
    const double plain = at::nll_loss(at::log_softmax(capped, -1), t, {}, at::Reduction::Sum).item<double>();
    EXPECT_TRUE(within("|chunked - plain capped loss| (float64)", std::abs(loss.item<double>() - plain), 1e-12));
  }
}

INSTANTIATE_TEST_SUITE_P(Caps, ChunkedLossCap, ::testing::Values(0.0, 2.0),
                         [](const auto& info) { return std::string(info.param > 0 ? "capped" : "uncapped"); });

TEST(ChunkedLoss, EqualsThePlainLossAndGradients) {
  at::manual_seed(4);
  auto h = at::randn({50, 16}).requires_grad_(true);
  auto w = at::randn({97, 16}).requires_grad_(true);
  auto t = at::randint(0, 97, {50}, at::kLong);
  auto chunked = train::chunked_cross_entropy_sum(h, w, t, 8);
  chunked.backward();
  auto gh = h.grad().clone(), gw = w.grad().clone();
  h.mutable_grad() = at::Tensor();
  w.mutable_grad() = at::Tensor();
  auto plain = plain_loss(h, w, t);
  plain.backward();
  // Both in float32, summed in another order. The loss (50 rows of ~5, a sum of ~250): within
  // the worst-case bound of its sums, ~(97 + 50) u |loss| ~ 2e-3; 1e-3. A gradient element is a
  // sum of at most 97 terms with sum |terms| <~ 3: worst case n u sum ~ 2e-5, typical
  // sqrt(n) u sum ~ 2e-6; 1e-5 sits between them (measured 1.2e-6).
  EXPECT_TRUE(within("|chunked loss - plain loss|", std::abs(chunked.item<double>() - plain.item<double>()), 1e-3));
  EXPECT_TRUE(within("max |d hidden: chunked - plain|", (gh - h.grad()).abs().max().item<double>(), 1e-5));
  EXPECT_TRUE(within("max |d weight: chunked - plain|", (gw - w.grad()).abs().max().item<double>(), 1e-5));
}

// The per-token log-probabilities (preference objectives' sums): a vector output whose backward
// recomputes each chunk. Against central finite differences of <upstream, logps> in float64,
// with a non-uniform upstream gradient (pairs weigh their rows differently), partial last chunk,
// plain and capped; and the forward against the plain log-softmax.
TEST_P(ChunkedLossCap, TokenLogpsGradientsMatchFiniteDifferences) {
  const double cap = GetParam();
  at::manual_seed(5);
  auto h = at::randn({7, 5}, at::kDouble).requires_grad_(true);
  auto w = at::randn({11, 5}, at::kDouble).requires_grad_(true);
  auto t = at::randint(0, 11, {7}, at::kLong);
  const auto upstream = at::randn({7}, at::kDouble);
  auto f = [&] {
    return (train::chunked_token_logps(h.detach(), w.detach(), t, 3, at::ScalarType::Undefined, cap) * upstream).sum().item<double>();
  };
  auto logps = train::chunked_token_logps(h, w, t, /*chunk_rows=*/3, at::ScalarType::Undefined, cap);
  (logps * upstream).sum().backward();
  const double worst = worst_finite_difference(f, {h, w});
  // As for the summed loss above: truncation ~1e-12, rounding ~1e-7 at worst; a wrong term is O(1).
  EXPECT_TRUE(within("token logps: max |finite difference - gradient|", worst, 1e-6));
  const auto z = cap > 0 ? at::tanh(at::matmul(h, w.t()) / cap) * cap : at::matmul(h, w.t());
  const auto plain = at::log_softmax(z, -1).gather(1, t.unsqueeze(1)).squeeze(1);
  EXPECT_TRUE(within("token logps: max |chunked - plain| (float64)", (logps - plain).abs().max().item<double>(), 1e-12));
}

TEST(ChunkedLoss, ChunkRowsKeepLogitsWithinBudget) {
  EXPECT_EQ(train::default_chunk_rows(128256, 4), (32ll << 20) / (4 * 128256));
  EXPECT_EQ(train::default_chunk_rows(49152, 2), (32ll << 20) / (2 * 49152));
  EXPECT_GE(train::default_chunk_rows(1 << 30, 4), 16);
}

}  // namespace

// The chunked weighted entropy (GRPO's entropy bonus) against central finite differences and
// against autograd over the whole logits (float64), at a temperature, capped and not: its
// gradient -p (log p + H) w / T (times the cap's derivative) is taken in forward.
TEST_P(ChunkedLossCap, EntropyGradientsMatchFiniteDifferencesAndAutograd) {
  const double cap = GetParam(), temperature = 0.7;
  at::manual_seed(9);
  auto h = at::randn({7, 5}, at::kDouble).requires_grad_(true);
  auto w = at::randn({11, 5}, at::kDouble).requires_grad_(true);
  const auto weights = at::rand({7}, at::kDouble);
  auto f = [&] {
    return 1.3 * train::chunked_entropy_sum(h.detach(), w.detach(), weights, temperature, 3, at::ScalarType::Undefined, cap).item<double>();
  };
  auto sum = train::chunked_entropy_sum(h, w, weights, temperature, /*chunk_rows=*/3, at::ScalarType::Undefined, cap);
  (sum * 1.3).backward();
  // As above: eps 1e-6 in float64, rounding ~1e-8 here; a wrong term is O(0.1).
  EXPECT_TRUE(within("entropy: max |finite difference - gradient|", worst_finite_difference(f, {h, w}), 1e-6));
  auto h2 = h.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  auto z = at::matmul(h2, w2.t());
  if (cap > 0) z = at::tanh(z / cap) * cap;
  const auto logp = at::log_softmax(z / temperature, -1);
  const auto plain = (-(logp.exp() * logp).sum(-1) * weights).sum();
  (plain * 1.3).backward();
  EXPECT_TRUE(within("entropy: |chunked - autograd|", std::abs(sum.item<double>() - plain.item<double>()), 1e-12));
  EXPECT_TRUE(within("entropy: |d hidden chunked - autograd|", (h.grad() - h2.grad()).abs().max().item<double>(), 1e-12));
  EXPECT_TRUE(within("entropy: |d weight chunked - autograd|", (w.grad() - w2.grad()).abs().max().item<double>(), 1e-12));
}
