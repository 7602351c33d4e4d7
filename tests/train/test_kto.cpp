// KTO against an independent float64 reference written from TRL 1.9's KTOTrainer
// (make_kto_reference.py): the loss, TRL's figures (rewards/chosen, rewards/rejected,
// rewards/margins, logps/chosen, logps/rejected, kl) and every trainable gradient, under full
// fine-tuning with the KL baseline clamped at 0 and with it positive (policy and reference
// swapped), and under LoRA (the reference the policy with its adapters off), each within
// kNoiseFactor times that value's own float32 noise (noise.json). Also: the precomputed
// reference gives the live reference's loss, and at the first step (policy = reference) the loss
// is TRL's closed form.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "core/json.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "train/objective/kto.h"
#include "train/objective/logps.h"
#include "train/objective/objectives.h"
#include "margins.h"
#include "reference_io.h"

namespace fs = std::filesystem;
using namespace ctune;

namespace {

const fs::path kRef = fs::path(CTUNE_TEST_DATA_DIR) / "kto-reference";

train::TensorBatch read_rows() {
  const Json rows = read_json_file(kRef / "rows.json");
  train::TensorBatch b = test::batch_from_json(rows);
  b.rows_per_group = 2;
  for (const auto& d : rows.at("desirable")) b.desirable.push_back(static_cast<std::int8_t>(d.get<int>()));
  for (std::int64_t r = 0; r < b.input_ids.size(0); ++r) b.examples.push_back(r);
  return b;
}

std::shared_ptr<const train::KindOptions> options_of(const Json& expected) {
  auto o = std::make_shared<train::KtoOptions>();
  o->beta = expected.at("beta").get<double>();
  o->desirable_weight = expected.at("desirable_weight").get<double>();
  o->undesirable_weight = expected.at("undesirable_weight").get<double>();
  return o;
}

// The frozen model of `dir` in eval mode.
model::CausalLM frozen(const fs::path& dir) {
  auto lm = model::load_causal_lm(dir, at::kFloat);
  for (auto& p : lm->parameters()) p.requires_grad_(false);
  lm->eval();
  return lm;
}

void kto_case(const std::string& kind) {
  const Json expected = read_json_file(kRef / "expected.json").at(kind);
  const Json noise = read_json_file(kRef / "noise.json").at(kind);
  model::CausalLM policy{nullptr}, reference{nullptr};
  if (kind == "full_swapped") {
    policy = model::load_causal_lm(kRef / "model", at::kFloat);
    peft::enable_full_finetune(policy);
    reference = frozen(kRef / "policy");
  } else {
    std::tie(policy, reference) = test::policy_and_reference(kRef, kind);
  }
  auto objective = train::make_objective(train::ObjectiveOptions("kto", options_of(expected)), /*chunked=*/true, reference);
  const auto batch = read_rows();
  const double units = objective->units(batch);
  ASSERT_EQ(units, 6.0);
  const auto terms = objective->forward(policy, batch);
  const auto loss = terms.loss_sum / units;
  loss.backward();
  test::expect_objective_matches(kRef, kind, policy, *objective, terms, units, 0.0, loss.item<double>(), expected, noise);
  const auto means = train::metric_means(*objective, terms.metric_sums, units, 0.0);
  std::vector<std::string> names;
  for (const auto& m : means) names.push_back(m.first);
  EXPECT_EQ(names, (std::vector<std::string>{"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "kl"}));
  if (reference) {
    for (const auto& p : reference->parameters()) EXPECT_FALSE(p.grad().defined());
  }
}

}  // namespace

// The batch's KL estimate is below 0 here: the baseline is clamped to 0 (expected.json's raw_kl).
TEST(KtoReference, FullWithTheBaselineClampedAtZero) { kto_case("full"); }
// Policy and reference swapped: every log-ratio negated, the baseline positive.
TEST(KtoReference, FullWithAPositiveBaseline) { kto_case("full_swapped"); }
TEST(KtoReference, Lora) { kto_case("lora"); }

// objective.precompute_reference: the table's entries (both kinds of row) stand for the
// reference's forward. The table holds float64 copies of the same fp32 forwards' sums, so the
// loss is the live loss up to fp32 rounding of sums near 40 (a few 1e-6; 1e-6 on the loss, whose
// terms' derivatives are at most beta / 4).
TEST(KtoReference, PrecomputedReferenceGivesTheLiveLoss) {
  const Json expected = read_json_file(kRef / "expected.json").at("full_swapped");
  auto policy = model::load_causal_lm(kRef / "model", at::kFloat);
  peft::enable_full_finetune(policy);
  auto reference = frozen(kRef / "policy");
  const auto batch = read_rows();
  auto table = std::make_shared<train::ReferenceTable>();
  {
    at::NoGradGuard no_grad;
    const auto sums = train::sequence_logps(reference, batch).sum.to(at::kDouble);
    for (std::int64_t r = 0; r < sums.size(0); ++r) table->train.push_back(sums[r].item<double>());
  }
  const train::ObjectiveOptions options("kto", options_of(expected));
  auto live = train::make_objective(options, true, reference);
  auto pre = train::make_objective(options, true, model::CausalLM(nullptr), table);
  at::NoGradGuard no_grad;
  const auto a = live->forward(policy, batch), b = pre->forward(policy, batch);
  EXPECT_NEAR(a.loss_sum.item<double>(), b.loss_sum.item<double>(), 1e-6);
  for (std::size_t i = 0; i < a.metric_sums.size(); ++i) EXPECT_NEAR(a.metric_sums[i], b.metric_sums[i], 1e-5 * (1 + std::abs(a.metric_sums[i])));
}

// At the first step the policy is the reference: every log-ratio and the KL estimate are 0, and
// TRL's loss is the weighted mean of 1 - sigmoid(0) = 1/2 (here (3 x 1.3 + 3 x 0.7) / 6 / 2 = 0.5),
// every reward 0. The same forwards of the same weights: the log-ratios are 0 up to the fp32
// rounding of two evaluations of sums near 40 (1e-5 allowed); the loss is six fp32 products
// summed, within a few roundings (2^-24) of 3.
TEST(KtoReference, AtTheFirstStepTheLossIsTheClosedForm) {
  const Json expected = read_json_file(kRef / "expected.json").at("full");
  auto policy = model::load_causal_lm(kRef / "model", at::kFloat);
  peft::enable_full_finetune(policy);
  auto objective = train::make_objective(train::ObjectiveOptions("kto", options_of(expected)), true, frozen(kRef / "model"));
  const auto batch = read_rows();
  const auto terms = objective->forward(policy, batch);
  const double wd = expected.at("desirable_weight").get<double>(), wu = expected.at("undesirable_weight").get<double>();
  EXPECT_NEAR(terms.loss_sum.item<double>(), (3 * wd + 3 * wu) * 0.5, 8 * 3 * 0x1p-24);
  for (const auto& [name, value] : train::metric_means(*objective, terms.metric_sums, 6.0, 0.0))
    if (name.rfind("rewards/", 0) == 0 || name == "kl") EXPECT_NEAR(value, 0.0, 1e-5) << name;
}
