// GRPO against an independent float64 reference written from TRL's GRPOTrainer
// (make_grpo_reference.py): the advantages from fixed rewards, then the loss, TRL's metrics and
// every trainable gradient for each aggregation (sequence: GRPO, token: DAPO, fixed: Dr. GRPO),
// each reward scaling, with and without the KL penalty, clip-higher, a temperature, the old
// log-probabilities given (num_iterations > 1) or the policy's own (on-policy), under full
// fine-tuning (the reference a frozen copy) and LoRA (adapters off), each within kNoiseFactor
// times that value's own float32 noise (noise.json).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "train/objective/grpo.h"
#include "train/objective/logps.h"
#include "train/objective/objectives.h"
#include "train/objective/rewards.h"
#include "margins.h"
#include "reference_io.h"

namespace fs = std::filesystem;
using namespace ctune;

namespace {

const fs::path kRef = fs::path(CTUNE_TEST_DATA_DIR) / "grpo-reference";


// Per target of `labels` in row-major order, the value of `per_position` ([B, T-1]: position
// t - 1 scores labels[t]).
at::Tensor at_targets(const Json& per_position, const at::Tensor& labels) {
  std::vector<double> out;
  const auto B = labels.size(0), T = labels.size(1);
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t t = 1; t < T; ++t)
      if (labels[r][t].item<std::int64_t>() != data::kIgnoreIndex) out.push_back(per_position.at(r).at(t - 1).get<double>());
  return at::tensor(out, at::kDouble);
}

void grpo_case(const std::string& name) {
  const Json expected = read_json_file(kRef / "expected.json").at(name);
  const Json noise = read_json_file(kRef / "noise.json").at(name);
  train::ObjectiveOptions o;
  o.name = "grpo";
  o.aggregation = expected.at("aggregation").get<std::string>();
  o.scale_rewards = expected.at("scale_rewards").get<std::string>();
  o.beta = expected.at("beta").get<double>();
  o.epsilon = expected.at("epsilon").get<double>();
  o.epsilon_high = expected.at("epsilon_high").get<double>();
  o.temperature = expected.at("temperature").get<double>();
  o.num_generations = expected.at("num_generations").get<std::int64_t>();
  o.max_new_tokens = expected.at("max_new_tokens").get<std::int64_t>();

  auto [policy, reference] = test::policy_and_reference(kRef, expected.at("kind").get<std::string>());
  train::TensorBatch batch = test::batch_from_json(read_json_file(kRef / "batch.json"));
  batch.rows_per_group = o.num_generations;
  batch.advantages = train::group_advantages(at::tensor(expected.at("rewards").get<std::vector<double>>(), at::kDouble),
                                             o.num_generations, o.scale_rewards);
  if (expected.at("old_given").get<bool>()) batch.old_logps = at_targets(expected.at("old"), batch.labels);
  if (o.beta > 0) batch.ref_logps = train::reference_token_logps(policy, reference, batch, o.temperature);

  auto objective = train::make_objective(o, /*chunked=*/true);
  const double units = objective->units(batch), token_units = objective->token_units(batch);
  ASSERT_EQ(token_units, 47.0);  // the six completions' tokens
  ASSERT_EQ(units, o.aggregation == "token" ? 47.0 : 6.0);
  const auto terms = objective->forward(policy, batch);
  const auto loss = terms.loss_sum / units;
  loss.backward();

  test::expect_objective_matches(kRef, name, policy, *objective, terms, units, token_units, loss.item<double>(), expected, noise);
}

}  // namespace

TEST(GrpoReference, FullSequenceGroupScaledWithKl) { grpo_case("full_grpo_group_kl"); }
TEST(GrpoReference, FullTokenBatchScaledClipHigher) { grpo_case("full_dapo_batch"); }
TEST(GrpoReference, FullFixedUnscaledWithKl) { grpo_case("full_drgrpo_none"); }
TEST(GrpoReference, FullTokenOnPolicy) { grpo_case("full_dapo_on_policy"); }
TEST(GrpoReference, LoraSequenceGroupScaledWithKl) { grpo_case("lora_grpo_group_kl"); }
TEST(GrpoReference, LoraTokenGroupScaled) { grpo_case("lora_dapo_group"); }

// Advantages of a group whose rewards are all equal are 0 (no signal), not NaN.
TEST(GrpoAdvantages, EqualRewardsGiveZero) {
  const auto adv = train::group_advantages(at::tensor({1.0, 1.0, 1.0, 0.0, 2.0, 1.0}, at::kDouble), 3, "group");
  EXPECT_EQ(adv[0].item<double>(), 0.0);
  EXPECT_EQ(adv[2].item<double>(), 0.0);
  EXPECT_NEAR(adv[3].item<double>(), -1.0 / (1.0 + 1e-4), 1e-12);  // std of {0, 2, 1} is 1
}

// The built-in rewards on the cases a user meets.
TEST(Rewards, BuiltInFunctionsScore) {
  std::vector<train::RewardSpec> specs(5);
  specs[0].name = "exact", specs[0].field = "answer";
  specs[1].name = "numeric", specs[1].field = "answer", specs[1].tolerance = 0.01;
  specs[2].name = "format", specs[2].pattern = "<answer>.*</answer>";
  specs[3].name = "length", specs[3].max_tokens = 10, specs[3].cache = 4;
  specs[4].name = "contains", specs[4].field = "answer";
  auto rewards = train::make_rewards(specs, 256);
  const OrderedJson fields = {{"answer", "1,234.5"}};
  const std::string prompt = "p", where = "data.train record 1";
  auto score = [&](std::size_t f, const std::string& completion, std::int64_t tokens = 3) {
    return rewards[f]->score({prompt, completion, tokens, fields, where});
  };
  EXPECT_EQ(score(0, "  1,234.5\n"), 1.0);
  EXPECT_EQ(score(0, "1234.5"), 0.0);
  EXPECT_EQ(score(1, "so it is 7 then 1234.5"), 1.0);
  EXPECT_EQ(score(1, "1234.52 and then 3"), 0.0);  // the last number counts
  EXPECT_EQ(score(1, "no number"), 0.0);
  EXPECT_EQ(score(2, "<answer>x</answer>"), 1.0);
  EXPECT_EQ(score(2, "say <answer>x</answer>"), 0.0);  // the whole completion
  EXPECT_EQ(score(3, "", 6), 0.0);
  EXPECT_EQ(score(3, "", 8), -0.5);
  EXPECT_EQ(score(3, "", 11), -1.0);
  EXPECT_EQ(score(4, "it is 1,234.5!"), 1.0);
  std::vector<train::RewardSpec> unknown(1);
  unknown[0].name = "bleu";
  EXPECT_THROW(train::make_rewards(unknown, 256), ConfigError);
  const std::vector<OrderedJson> records = {{{"answer", "a"}}, {{"other", "b"}}};
  try {
    train::check_fields(rewards, records, "data.train");
    FAIL() << "a record without the field passed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train record 2 has no field \"answer\""), std::string::npos) << e.what();
  }
}
