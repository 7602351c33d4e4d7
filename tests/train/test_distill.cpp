// On-policy distillation (objective.name distill): the loss against an independent float64
// reference written from TRL's GKDTrainer (make_distill_reference.py) at beta 0 (forward KL), 0.5
// (the generalized JSD) and 1 (reverse KL), under full fine-tuning (the chunked head) and LoRA on
// every layer and the head (autograd over each chunk), each value within kNoiseFactor times its
// own float32 noise; a student distilled from itself has loss 0 and zero gradients; the chunked
// divergence's hand-written gradient against finite differences; the batch source's prompts and
// its lmbda draws.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "core/json.h"
#include "model/weights.h"
#include "train/objective/distill.h"
#include "train/objective/distill_source.h"
#include "train/objective/objectives.h"
#include "train/step/chunked_loss.h"
#include "finite_difference.h"
#include "margins.h"
#include "reference_io.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::within;

namespace {

const fs::path kRef = fs::path(CTUNE_TEST_DATA_DIR) / "distill-reference";

model::CausalLM frozen(const fs::path& dir) {
  auto lm = model::load_causal_lm(dir, at::kFloat);
  for (auto& p : lm->parameters()) p.requires_grad_(false);
  lm->eval();
  return lm;
}

std::shared_ptr<train::Objective> objective_of(double beta, model::CausalLM teacher) {
  auto o = std::make_shared<train::DistillOptions>();
  o->beta = beta;
  return train::make_objective(train::ObjectiveOptions("distill", o), /*chunked=*/true, model::CausalLM(nullptr), nullptr, std::move(teacher));
}

// One micro-batch, its loss over its target tokens, as the trainer normalises it.
train::ObjectiveTerms run(train::Objective& objective, model::CausalLM& student, const train::TensorBatch& batch, double& units) {
  units = objective.units(batch);
  auto terms = objective.forward(student, batch);
  (terms.loss_sum / units).backward();
  return terms;
}

void distill_case(const std::string& name) {
  const Json expected = read_json_file(kRef / "expected.json").at(name);
  const Json noise = read_json_file(kRef / "noise.json").at(name);
  const bool lora = expected.at("kind").get<std::string>() == "lora";
  model::CausalLM student = lora ? test::lora_policy(kRef) : model::load_causal_lm(kRef / "policy", at::kFloat);
  if (!lora)
    for (auto& p : student->parameters()) p.requires_grad_(true);
  student->train();
  auto objective = objective_of(expected.at("beta").get<double>(), frozen(kRef / (lora ? "policy" : "model")));
  const train::TensorBatch batch = test::batch_from_json(read_json_file(kRef / "rows.json"));
  double units = 0;
  const auto terms = run(*objective, student, batch, units);
  ASSERT_EQ(units, 48.0);  // the six completions' tokens
  test::expect_objective_matches(kRef, name, student, *objective, terms, units, 0, terms.loss_sum.item<double>() / units, expected, noise);
}

}  // namespace

TEST(DistillReference, ForwardKlAtBetaZero) { distill_case("full_beta0"); }
TEST(DistillReference, GeneralizedJsdAtBetaHalf) { distill_case("full_beta05"); }
TEST(DistillReference, ReverseKlAtBetaOne) { distill_case("full_beta1"); }
TEST(DistillReference, LoraWithAnAdapterOnTheHead) { distill_case("lora_beta05"); }

// A student distilled from a copy of itself: both distributions are the same up to the rounding
// of two evaluations of one float32 computation (the chunked head's matmul against the teacher's
// head). The divergence is then 0 up to its own float32 evaluation (the sum over the vocabulary
// of terms that cancel): within the tolerance of the reference's loss at beta 0.5 (its measured
// float32 noise, noise.json); its gradient, linear in the logits' difference (relative rounding
// ~1e-7 of logits of order 1), is at most 1e-5 of the gradient this student has towards another
// teacher (full_beta05's).
TEST(DistillClosedForm, AStudentEqualToItsTeacherHasZeroLossAndGradients) {
  const train::TensorBatch batch = test::batch_from_json(read_json_file(kRef / "rows.json"));
  auto gradient_norm = [&](const fs::path& teacher, double& loss) {
    auto student = model::load_causal_lm(kRef / "model", at::kFloat);
    for (auto& p : student->parameters()) p.requires_grad_(true);
    student->train();
    auto objective = objective_of(0.5, frozen(teacher));
    double units = 0;
    loss = run(*objective, student, batch, units).loss_sum.item<double>() / units;
    double squares = 0;
    for (const auto& p : student->parameters()) squares += p.grad().to(at::kDouble).square().sum().item<double>();
    return std::sqrt(squares);
  };
  double self_loss = 0, other_loss = 0;
  const double self = gradient_norm(kRef / "model", self_loss), other = gradient_norm(kRef / "policy", other_loss);
  const double noise = read_json_file(kRef / "noise.json").at("full_beta05").at("loss").get<double>();
  EXPECT_TRUE(within("|loss| distilled from itself", std::abs(self_loss), test::noise_tolerance(noise)));
  EXPECT_GT(other_loss, 1e-3);
  EXPECT_TRUE(within("gradient norm from itself / from another teacher", self / other, 1e-5));
}

// The chunked divergence's gradient (taken in forward from closed forms, chunked_loss.cpp) against
// central finite differences in float64, several chunks and a partial last one, plain and with a
// soft-cap; its value against the same divergence over the whole logits through autograd.
class ChunkedJsd : public ::testing::TestWithParam<std::tuple<double, double>> {};

TEST_P(ChunkedJsd, GradientsMatchFiniteDifferencesAndAutograd) {
  const auto [beta, cap] = GetParam();
  at::manual_seed(5);
  auto h = at::randn({7, 5}, at::kDouble).requires_grad_(true);
  auto w = at::randn({11, 5}, at::kDouble).requires_grad_(true);
  const auto teacher = at::randn({7, 11}, at::kDouble) * 2;
  const train::TeacherLogits logits = [&](std::int64_t start, std::int64_t rows) { return teacher.narrow(0, start, rows); };
  auto f = [&] { return 1.3 * train::chunked_jsd_sum(h.detach(), w.detach(), logits, beta, 3, at::ScalarType::Undefined, cap).item<double>(); };
  auto loss = train::chunked_jsd_sum(h, w, logits, beta, /*chunk_rows=*/3, at::ScalarType::Undefined, cap);  // chunks of 3, 3, 1
  (loss * 1.3).backward();
  // As the chunked cross-entropy's test: eps 1e-6 in float64, truncation ~1e-12, rounding ~1e-8
  // here (|f| ~ 5); a wrong term of the closed form is O(0.1).
  EXPECT_TRUE(within("max |finite difference - gradient|", test::worst_finite_difference(f, {h, w}), 1e-6));
  // The same divergence through autograd over the whole logits (jsd_rows without its gradient).
  auto h2 = h.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  auto z = at::matmul(h2, w2.t());
  if (cap > 0) z = at::tanh(z / cap) * cap;
  at::Tensor rows;
  train::jsd_rows(z, teacher, beta, &rows, nullptr);
  (rows.sum() * 1.3).backward();
  EXPECT_TRUE(within("|chunked - autograd loss|", std::abs(loss.item<double>() - rows.sum().item<double>()), 1e-12));
  EXPECT_TRUE(within("|d hidden chunked - autograd|", (h.grad() - h2.grad()).abs().max().item<double>(), 1e-12));
  EXPECT_TRUE(within("|d weight chunked - autograd|", (w.grad() - w2.grad()).abs().max().item<double>(), 1e-12));
}

std::string jsd_case_name(const ::testing::TestParamInfo<std::tuple<double, double>>& info) {
  const double beta = std::get<0>(info.param);
  return std::string(beta == 0 ? "forward" : beta == 1 ? "reverse" : "jsd") + (std::get<1>(info.param) > 0 ? "_capped" : "");
}

INSTANTIATE_TEST_SUITE_P(BetasAndCaps, ChunkedJsd, ::testing::Combine(::testing::Values(0.0, 0.3, 1.0), ::testing::Values(0.0, 2.0)),
                         jsd_case_name);

// A prompt is everything before the example's last trained span (GKD: all but the last turn).
TEST(DistillSource, PromptIsEverythingBeforeTheLastTrainedSpan) {
  constexpr std::int32_t x = data::kIgnoreIndex;
  data::Example e;
  e.ids = {1, 2, 3, 4, 5, 6, 7, 8};
  e.labels = {x, x, 3, 4, x, x, 7, x};
  EXPECT_EQ(train::DistillSource::prompt_of(e), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  e.labels = {x, x, x, 4, 5, 6, 7, 8};
  EXPECT_EQ(train::DistillSource::prompt_of(e), (std::vector<std::int32_t>{1, 2, 3}));
}

// lmbda is the fraction of on-policy micro-batches: 20000 draws land within 4 standard
// deviations (sqrt(l (1 - l) / n) = 0.0032 at 0.3) of it; 0 and 1 are never and always.
TEST(DistillSource, LmbdaIsTheOnPolicyFraction) {
  for (const double lmbda : {0.0, 0.3, 1.0}) {
    double on = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) on += train::DistillSource::on_policy(42, i, lmbda) ? 1 : 0;
    EXPECT_TRUE(within("|on-policy fraction - lmbda|", std::abs(on / n - lmbda), 4 * std::sqrt(lmbda * (1 - lmbda) / n)));
  }
}
