// DPO, SimPO and ORPO against an independent float64 reference written from TRL's DPOTrainer,
// CPOTrainer and ORPOTrainer (make_dpo_reference.py): the loss, TRL's metrics and every
// trainable gradient, for DPO's sigmoid (with label smoothing), hinge and IPO losses, SimPO and ORPO, under full fine-tuning (the reference a
// frozen copy of the base, the policy elsewhere) and LoRA (the reference the policy with its
// adapters off), each within kNoiseFactor times that value's own float32 noise (noise.json).
// Also: the adapters-off reference is exactly the base model.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "train/objective/dpo.h"
#include "train/objective/logps.h"
#include "train/objective/objectives.h"
#include "train/objective/orpo.h"
#include "train/objective/simpo.h"
#include "margins.h"
#include "reference_io.h"

namespace fs = std::filesystem;
using namespace ctune;

namespace {

const fs::path kRef = fs::path(CTUNE_TEST_DATA_DIR) / "dpo-reference";

train::TensorBatch read_pairs() {
  train::TensorBatch b = test::batch_from_json(read_json_file(kRef / "pairs.json"));
  b.rows_per_group = 2;
  return b;
}


void dpo_case(const std::string& kind, const std::string& loss_type) {
  const std::string name = kind + "_" + loss_type;
  const Json expected = read_json_file(kRef / "expected.json").at(name);
  const Json noise = read_json_file(kRef / "noise.json").at(name);
  const std::string objective_name = expected.at("objective").get<std::string>();
  const double beta = expected.at("beta").get<double>(), label_smoothing = expected.at("label_smoothing").get<double>();
  std::shared_ptr<train::KindOptions> own;
  if (objective_name == "dpo") {
    auto o = std::make_shared<train::DpoOptions>();
    o->loss_type = loss_type, o->beta = beta, o->label_smoothing = label_smoothing;
    own = o;
  } else if (objective_name == "simpo") {
    auto o = std::make_shared<train::SimpoOptions>();
    o->gamma = expected.at("gamma").get<double>(), o->beta = beta, o->label_smoothing = label_smoothing;
    own = o;
  } else {
    auto o = std::make_shared<train::OrpoOptions>();
    o->beta = beta;
    own = o;
  }

  auto [policy, reference] = test::policy_and_reference(kRef, kind);
  auto objective = train::make_objective(train::ObjectiveOptions(objective_name, own), /*chunked=*/true, reference);
  const auto batch = read_pairs();
  const double units = objective->units(batch), token_units = objective->token_units(batch);
  ASSERT_EQ(units, 3.0);
  const auto terms = objective->forward(policy, batch);
  auto loss = terms.loss_sum / units;
  if (terms.token_loss_sum.defined()) loss = loss + terms.token_loss_sum / token_units;  // ORPO's NLL part
  loss.backward();

  test::expect_objective_matches(kRef, name, policy, *objective, terms, units, token_units, loss.item<double>(), expected, noise);
  if (reference) {
    for (const auto& p : reference->parameters()) EXPECT_FALSE(p.grad().defined());
  }
}

}  // namespace

TEST(DpoReference, FullSigmoidWithLabelSmoothing) { dpo_case("full", "sigmoid"); }
TEST(DpoReference, FullHinge) { dpo_case("full", "hinge"); }
TEST(DpoReference, FullIpo) { dpo_case("full", "ipo"); }
TEST(DpoReference, LoraSigmoidWithLabelSmoothing) { dpo_case("lora", "sigmoid"); }
TEST(DpoReference, LoraHinge) { dpo_case("lora", "hinge"); }
TEST(DpoReference, LoraIpo) { dpo_case("lora", "ipo"); }
// SimPO (reference-free): the full case's policy alone, the LoRA case's adapters on.
TEST(DpoReference, FullSimpo) { dpo_case("full", "simpo"); }
TEST(DpoReference, LoraSimpo) { dpo_case("lora", "simpo"); }
// ORPO: the chosen sequences' token NLL (prompt included) plus the odds-ratio term.
TEST(DpoReference, FullOrpo) { dpo_case("full", "orpo"); }
TEST(DpoReference, LoraOrpo) { dpo_case("lora", "orpo"); }

// The registry and the schema name the same objectives (registry.cpp checks it at the first use),
// and the messages list each data's objectives from the registry.
TEST(ObjectiveKinds, RegistryAgreesWithTheSchema) {
  ASSERT_NO_THROW(train::all_objective_kinds());
  EXPECT_EQ(train::objective_names(train::ObjectiveData::pairs), "dpo, simpo or orpo");
  EXPECT_EQ(train::objective_names(train::ObjectiveData::prompts), "grpo or rloo");
  EXPECT_EQ(train::objective_names(train::ObjectiveData::unpaired), "kto");
  EXPECT_EQ(train::ObjectiveOptions().name(), "sft");
  EXPECT_THROW(train::objective_kind("ppo"), ConfigError);
}

// Under LoRA the reference is the policy with its adapters off: bit for bit the base model's
// log-probabilities (the adapters' B is non-zero here, so on they differ).
TEST(DpoReference, AdaptersOffIsExactlyTheBase) {
  at::NoGradGuard no_grad;
  auto policy = test::lora_policy(kRef);
  auto base = model::load_causal_lm(kRef / "model", at::kFloat);
  const auto batch = read_pairs();
  const auto of_base = train::sequence_logps(base, batch).sum;
  at::Tensor off;
  {
    model::AdaptersOff guard;
    off = train::sequence_logps(policy, batch).sum;
  }
  const auto on = train::sequence_logps(policy, batch).sum;
  EXPECT_TRUE(at::equal(off, of_base)) << off << of_base;
  EXPECT_GT((on - of_base).abs().max().item<double>(), 1e-2);
}
