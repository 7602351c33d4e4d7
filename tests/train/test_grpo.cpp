// GRPO against an independent float64 reference written from TRL's GRPOTrainer
// (make_grpo_reference.py): the advantages from fixed rewards, then the loss, TRL's metrics and
// every trainable gradient for each loss_type (grpo, bnpo, dr_grpo, dapo, cispo) at each
// importance_sampling_level (token, sequence: GSPO), each reward scaling, with and without the KL
// penalty, clip-higher, two-sided clipping (delta), the top-entropy tokens, a temperature, the old
// log-probabilities given (num_iterations > 1) or the policy's own (on-policy), under full
// fine-tuning (the reference a frozen copy) and LoRA (adapters off), each within kNoiseFactor
// times that value's own float32 noise (noise.json). bnpo's cases run as two micro-batches, the
// one loss type whose value depends on them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "train/objective/grpo.h"
#include "train/objective/logps.h"
#include "train/objective/objectives.h"
#include "train/objective/rewards.h"
#include "train/objective/shared_prompt.h"
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

// Per group of `group` rows, its prompt's length: the first row's tokens before its first target.
std::vector<std::int64_t> prompt_lengths_of(const at::Tensor& labels, std::int64_t group) {
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < labels.size(0); r += group) {
    std::int64_t t = 0;
    while (labels[r][t].item<std::int64_t>() == data::kIgnoreIndex) ++t;
    out.push_back(t);
  }
  return out;
}

// Rows [first, first + n) of `b` (a micro-batch of the step).
train::TensorBatch rows_of(const train::TensorBatch& b, std::int64_t first, std::int64_t n) {
  train::TensorBatch out;
  out.input_ids = b.input_ids.narrow(0, first, n);
  out.labels = b.labels.narrow(0, first, n);
  out.position_ids = b.position_ids.narrow(0, first, n);
  out.segment_ids = b.segment_ids.narrow(0, first, n);
  out.target_tokens = (out.labels.narrow(1, 1, out.labels.size(1) - 1) != data::kIgnoreIndex).sum().item<std::int64_t>();
  out.advantages = b.advantages.narrow(0, first, n);
  out.rows_per_group = b.rows_per_group;
  return out;
}

train::GrpoOptions options_of(const Json& expected) {
  train::GrpoOptions o;
  o.loss_type = expected.at("loss_type").get<std::string>();
  o.importance_sampling_level = expected.value("importance_sampling_level", o.importance_sampling_level);
  o.delta = expected.value("delta", o.delta);
  o.top_entropy_quantile = expected.value("top_entropy_quantile", o.top_entropy_quantile);
  o.entropy_coef = expected.value("entropy_coef", o.entropy_coef);
  o.scale_rewards = expected.at("scale_rewards").get<std::string>();
  o.beta = expected.at("beta").get<double>();
  o.epsilon = expected.at("epsilon").get<double>();
  o.epsilon_high = expected.at("epsilon_high").get<double>();
  o.temperature = expected.at("temperature").get<double>();
  o.num_generations = expected.at("num_generations").get<std::int64_t>();
  o.max_new_tokens = expected.at("max_new_tokens").get<std::int64_t>();
  return o;
}

// `shared`: the batch in the shared-prompt layout (train/objective/shared_prompt.h), the
// reference's log-probabilities computed over it. The step's micro-batches (expected.json's
// micro_batches: 2 for bnpo) are groups of rows; their loss sums and units add up as the
// trainer adds them.
void grpo_case(const std::string& name, bool shared = false) {
  const Json expected = read_json_file(kRef / "expected.json").at(name);
  const Json noise = read_json_file(kRef / "noise.json").at(name);
  const train::GrpoOptions o = options_of(expected);

  auto [policy, reference] = test::policy_and_reference(kRef, expected.at("kind").get<std::string>());
  train::TensorBatch batch = test::batch_from_json(read_json_file(kRef / "batch.json"));
  batch.rows_per_group = o.num_generations;
  batch.advantages = train::group_advantages(at::tensor(expected.at("rewards").get<std::vector<double>>(), at::kDouble),
                                             o.num_generations, o.scale_rewards);
  const bool old_given = expected.at("old_given").get<bool>();
  const auto old = old_given ? at_targets(expected.at("old"), batch.labels) : at::Tensor();
  const std::int64_t micro = expected.value("micro_batches", 1), rows = batch.input_ids.size(0);
  auto objective = train::make_objective(train::ObjectiveOptions("grpo", std::make_shared<train::GrpoOptions>(o)), /*chunked=*/true);
  std::vector<train::TensorBatch> parts;
  std::int64_t old_at = 0;
  for (std::int64_t m = 0; m < micro; ++m) {
    train::TensorBatch part = micro == 1 ? batch : rows_of(batch, m * rows / micro, rows / micro);
    if (old_given) part.old_logps = old.narrow(0, old_at, part.target_tokens);
    old_at += part.target_tokens;
    if (shared) {
      const auto n = part.input_ids.size(0), length = part.input_ids.size(1);
      part = train::share_prompts(part, prompt_lengths_of(part.labels, o.num_generations), o.num_generations, 0);
      EXPECT_EQ(part.input_ids.size(0), n / o.num_generations);
      EXPECT_LT(part.input_ids.numel(), n * length);
    }
    if (o.beta > 0) part.ref_logps = train::reference_token_logps(policy, reference, part, o.temperature);
    parts.push_back(std::move(part));
  }
  double units = 0, token_units = 0;
  for (const auto& part : parts) units += objective->units(part), token_units += objective->token_units(part);
  ASSERT_EQ(token_units, 47.0);  // the six completions' tokens
  const bool per_token = o.loss_type == "dapo" || o.loss_type == "cispo";
  ASSERT_EQ(units, per_token ? 47.0 : 6.0);
  train::ObjectiveTerms terms;
  for (const auto& part : parts) {
    auto t = objective->forward(policy, part);
    (t.loss_sum / units).backward();
    terms.loss_sum = terms.loss_sum.defined() ? terms.loss_sum + t.loss_sum.detach() : t.loss_sum.detach();
    if (terms.metric_sums.empty()) terms.metric_sums.assign(t.metric_sums.size(), 0.0);
    for (std::size_t i = 0; i < t.metric_sums.size(); ++i) terms.metric_sums[i] += t.metric_sums[i];
  }
  const double loss = terms.loss_sum.item<double>() / units;
  test::expect_objective_matches(kRef, name, policy, *objective, terms, units, token_units, loss, expected, noise);
}

// RLOO (make_grpo_reference.py's RLOO_CASES): the advantages as the rollout takes them (each
// completion's summed old - ref from its reward, then leave_one_out_advantages), the loss, the
// metrics and every gradient; optionally in the shared-prompt layout.
void rloo_case(const std::string& name, bool shared = false) {
  const Json expected = read_json_file(kRef / "expected.json").at(name);
  const Json noise = read_json_file(kRef / "noise.json").at(name);
  train::GrpoOptions o;
  o.leave_one_out = true;
  o.normalize_advantages = expected.at("normalize_advantages").get<bool>();
  o.beta = expected.at("beta").get<double>();
  o.epsilon = expected.at("epsilon").get<double>();
  o.epsilon_high = expected.at("epsilon_high").get<double>();
  o.temperature = expected.at("temperature").get<double>();
  o.num_generations = expected.at("num_generations").get<std::int64_t>();

  auto [policy, reference] = test::policy_and_reference(kRef, expected.at("kind").get<std::string>());
  train::TensorBatch batch = test::batch_from_json(read_json_file(kRef / "batch.json"));
  batch.rows_per_group = o.num_generations;
  batch.old_logps = at_targets(expected.at("old"), batch.labels);
  const auto rows = batch.input_ids.size(0);
  auto rewards = at::tensor(expected.at("rewards").get<std::vector<double>>(), at::kDouble);
  if (o.beta > 0) {
    batch.ref_logps = train::reference_token_logps(policy, reference, batch, o.temperature);
    // Each target's row, in at_targets' row-major order.
    std::vector<std::int64_t> row_of;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t t = 1; t < batch.labels.size(1); ++t)
        if (batch.labels[r][t].item<std::int64_t>() != data::kIgnoreIndex) row_of.push_back(r);
    const auto kl = at::zeros({rows}, at::kDouble).index_add(0, at::tensor(row_of, at::kLong), (batch.old_logps - batch.ref_logps).to(at::kDouble));
    rewards = rewards - o.beta * kl;
  }
  batch.advantages = train::leave_one_out_advantages(rewards, o.num_generations, o.normalize_advantages);
  if (shared) {
    batch = train::share_prompts(batch, prompt_lengths_of(batch.labels, o.num_generations), o.num_generations, 0);
    if (o.beta > 0) batch.ref_logps = train::reference_token_logps(policy, reference, batch, o.temperature);
  }
  auto objective = train::make_objective(train::ObjectiveOptions("rloo", std::make_shared<train::GrpoOptions>(o)), /*chunked=*/true);
  const double units = objective->units(batch), token_units = objective->token_units(batch);
  ASSERT_EQ(units, 6.0);  // completions
  ASSERT_EQ(token_units, 47.0);
  const auto terms = objective->forward(policy, batch);
  const auto loss = terms.loss_sum / units;
  loss.backward();
  test::expect_objective_matches(kRef, name, policy, *objective, terms, units, token_units, loss.item<double>(), expected, noise);
}

const char* const kCases[] = {"full_grpo_group_kl", "full_dapo_batch",     "full_drgrpo_none",     "full_dapo_on_policy",
                              "lora_grpo_group_kl", "lora_dapo_group",     "full_bnpo_token",      "full_cispo_token",
                              "full_grpo_sequence", "full_bnpo_sequence",  "full_drgrpo_sequence", "full_dapo_sequence",
                              "full_cispo_sequence", "lora_grpo_sequence", "full_dapo_delta",      "full_dapo_top_entropy",
                              "lora_cispo_top_entropy", "full_dapo_entropy_coef", "full_grpo_entropy_coef_top", "full_bnpo_entropy_coef",
                              "lora_dapo_entropy_coef"};

}  // namespace

TEST(GrpoReference, FullSequenceGroupScaledWithKl) { grpo_case("full_grpo_group_kl"); }
TEST(GrpoReference, FullTokenBatchScaledClipHigher) { grpo_case("full_dapo_batch"); }
TEST(GrpoReference, FullFixedUnscaledWithKl) { grpo_case("full_drgrpo_none"); }
TEST(GrpoReference, FullTokenOnPolicy) { grpo_case("full_dapo_on_policy"); }
TEST(GrpoReference, LoraSequenceGroupScaledWithKl) { grpo_case("lora_grpo_group_kl"); }
TEST(GrpoReference, LoraTokenGroupScaled) { grpo_case("lora_dapo_group"); }
// loss_type x importance_sampling_level, two-sided clipping and the top-entropy tokens.
TEST(GrpoReference, BnpoOverTwoMicroBatches) {
  grpo_case("full_bnpo_token");
  grpo_case("full_bnpo_sequence");
}
TEST(GrpoReference, CispoClipsTheWeightsNotTheLoss) {
  grpo_case("full_cispo_token");
  grpo_case("full_cispo_sequence");
}
TEST(GrpoReference, SequenceLevelWeightsAsGspo) {
  for (const char* name : {"full_grpo_sequence", "full_drgrpo_sequence", "full_dapo_sequence", "lora_grpo_sequence"}) {
    SCOPED_TRACE(name);
    grpo_case(name);
  }
}
TEST(GrpoReference, DeltaCapsTheUnclippedWeight) { grpo_case("full_dapo_delta"); }
TEST(GrpoReference, OnlyTheTopEntropyTokensTrain) {
  grpo_case("full_dapo_top_entropy");
  grpo_case("lora_cispo_top_entropy");
}
TEST(GrpoReference, EntropyBonusWithItsGradient) {
  grpo_case("full_dapo_entropy_coef");
  grpo_case("full_grpo_entropy_coef_top");
  grpo_case("full_bnpo_entropy_coef");
  grpo_case("lora_dapo_entropy_coef");  // the head has an adapter: autograd over each chunk
}
TEST(RlooReference, LeaveOneOutWithTheKlInTheReward) {
  rloo_case("full_rloo_kl");
  rloo_case("lora_rloo_kl");
}
TEST(RlooReference, NormalisedAdvantages) { rloo_case("full_rloo_normalized"); }
TEST(RlooReference, EveryCaseWithSharedPrompts) {
  for (const char* name : {"full_rloo_kl", "full_rloo_normalized", "lora_rloo_kl"}) {
    SCOPED_TRACE(name);
    rloo_case(name, /*shared=*/true);
  }
}
// The leave-one-out baseline by hand: rewards {1, 0, 2} give advantages {1 - 1, 0 - 1.5, 2 - 0.5}.
TEST(RlooAdvantages, EachBaselineIsItsSiblingsMean) {
  const auto adv = train::leave_one_out_advantages(at::tensor({1.0, 0.0, 2.0}, at::kDouble), 3, false);
  EXPECT_EQ(adv[0].item<double>(), 0.0);
  EXPECT_EQ(adv[1].item<double>(), -1.5);
  EXPECT_EQ(adv[2].item<double>(), 1.5);
}

// The same cases with every group trained as one row after one copy of its prompt.
TEST(GrpoReference, EveryCaseWithSharedPrompts) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    grpo_case(name, /*shared=*/true);
  }
}

// Shared prompts against separate rows in float64, where only the order of sums differs (bound:
// 1e-10 relative, about 1e6 times float64's rounding of these few-hundred-term sums, and 1e6
// times below the float32 noise the reference cases allow): the loss, the metrics and every
// gradient, on families whose sliding windows (8 positions, shorter than the rows), soft-caps,
// sandwich norms, fused projections, partial rotary and routers all meet the shared layout.
// Routers compute their weights in fp32 whatever the model's dtype (as transformers does), so a
// weight whose float64 logits differ in the last bits can round one fp32 ulp (6e-8) apart: the
// MoE case's bound is 1e-6 (measured up to 5e-8).
TEST(GrpoSharedPrompt, SeparateRowsAndSharedPromptsAgreeOnEveryFamily) {
  const fs::path data(CTUNE_TEST_DATA_DIR);
  for (const std::string dir : {"train-reference", "train-reference-gemma2", "train-reference-gemma3", "train-reference-phi3",
                                "train-reference-qwen3_moe"}) {
    SCOPED_TRACE(dir);
    auto lm = model::load_causal_lm(data / dir / "model", at::kDouble);
    const double bound = lm->config().arch.moe.experts > 0 ? 1e-6 : 1e-10;
    lm->train();
    const std::int64_t G = 3, V = lm->config().vocab_size;
    const std::vector<std::int64_t> prompts = {10, 13}, completions = {1, 6, 9, 7, 2, 9};
    at::manual_seed(7);
    train::TensorBatch b;
    const std::int64_t rows = 6, T = 22;
    b.input_ids = at::zeros({rows, T}, at::kLong);
    b.labels = at::full({rows, T}, data::kIgnoreIndex, at::kLong);
    b.position_ids = at::zeros({rows, T}, at::kLong);
    b.segment_ids = at::zeros({rows, T}, at::kInt);
    for (std::int64_t g = 0; g < 2; ++g) {
      const auto prompt = at::randint(1, V, {prompts[g]}, at::kLong);
      for (std::int64_t i = 0; i < G; ++i) {
        const auto r = g * G + i, n = completions[r], used = prompts[g] + n;
        b.input_ids[r].narrow(0, 0, prompts[g]).copy_(prompt);
        b.input_ids[r].narrow(0, prompts[g], n).copy_(at::randint(1, V, {n}, at::kLong));
        b.labels[r].narrow(0, prompts[g], n).copy_(b.input_ids[r].narrow(0, prompts[g], n));
        b.position_ids[r].narrow(0, 0, used).copy_(at::arange(used, at::kLong));
        b.segment_ids[r].narrow(0, 0, used).fill_(1);
        b.target_tokens += n;
      }
    }
    b.rows_per_group = G;
    b.advantages = train::group_advantages(at::tensor(std::vector<double>{1, 0, 0.5, 0, 1, 1}, at::kDouble), G, "group");
    b.old_logps = -at::rand({b.target_tokens}, at::kDouble) * 4.0;  // ratios far from 1: both clip sides
    b.ref_logps = -at::rand({b.target_tokens}, at::kDouble) * 4.0;
    train::GrpoOptions o;
    o.loss_type = "grpo";
    o.num_generations = G;
    o.temperature = 0.7;
    o.beta = 0.04;
    auto objective = train::make_objective(train::ObjectiveOptions("grpo", std::make_shared<train::GrpoOptions>(o)), /*chunked=*/true);
    auto run = [&](const train::TensorBatch& batch) {
      for (auto& p : lm->parameters()) p.mutable_grad() = at::Tensor();
      const auto terms = objective->forward(lm, batch);
      terms.loss_sum.backward();
      std::map<std::string, at::Tensor> grads;
      for (const auto& p : lm->named_parameters())
        if (p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
      return std::make_tuple(terms.loss_sum.item<double>(), terms.metric_sums, grads);
    };
    const auto [loss, metrics, grads] = run(b);
    const auto shared = train::share_prompts(b, prompts, G, 0);
    ASSERT_EQ(shared.input_ids.size(1), std::max<std::int64_t>(9 + 2 + 7 + 10, 12 + 8 + 3 + 10));  // p - 1 + each completion + 1
    const auto [shared_loss, shared_metrics, shared_grads] = run(shared);
    EXPECT_NEAR(shared_loss, loss, bound * std::abs(loss));
    ASSERT_EQ(shared_metrics.size(), metrics.size());
    for (std::size_t i = 0; i < metrics.size(); ++i) EXPECT_NEAR(shared_metrics[i], metrics[i], bound * std::max(1.0, std::abs(metrics[i])));
    ASSERT_EQ(shared_grads.size(), grads.size());
    for (const auto& [name, g] : grads) EXPECT_LE(test::relative_error(shared_grads.at(name), g), bound) << name;
  }
}

// Advantages of a group whose rewards are all equal are 0 (no signal), not NaN.
TEST(GrpoAdvantages, EqualRewardsGiveZero) {
  const auto adv = train::group_advantages(at::tensor({1.0, 1.0, 1.0, 0.0, 2.0, 1.0}, at::kDouble), 3, "group");
  EXPECT_EQ(adv[0].item<double>(), 0.0);
  EXPECT_EQ(adv[2].item<double>(), 0.0);
  EXPECT_NEAR(adv[3].item<double>(), -1.0 / (1.0 + 1e-4), 1e-12);  // std of {0, 2, 1} is 1
}

// multi_objective_aggregation normalize_then_sum, derived by hand: two functions weighted 1 and 2,
// two groups of two. Group 1: f1 {1, 0} normalises to +-a (a = 0.5 / (std 0.7071 + 1e-4)), f2
// {0, 0} to 0; group 2: f1 {1, 1} to 0, f2 {1, 0} to +-a. Sums {a, -a, 2a, -2a}: mean 0, std
// a sqrt(10 / 3), each divided by (std + 1e-4).
TEST(GrpoAdvantages, NormalizeThenSumNormalisesEachRewardInItsGroupThenTheBatch) {
  const auto scores = at::tensor({1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0}, at::kDouble).view({4, 2});
  const auto adv = train::normalized_sum_advantages(scores, at::tensor({1.0, 2.0}, at::kDouble), 2);
  const double a = 0.5 / (std::sqrt(0.5) + 1e-4), s = a * std::sqrt(10.0 / 3.0) + 1e-4;
  const std::vector<double> want = {a / s, -a / s, 2 * a / s, -2 * a / s};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(adv[i].item<double>(), want[i], 1e-12) << i;
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

// Reward patterns are Python `re` patterns (Oniguruma's Python syntax): `regex` searches,
// `format` matches the whole completion; a search past the bound on backtracking scores 0 and
// is counted (docs/objectives.md#rewards).
TEST(Rewards, PatternsArePythonPatternsSearchedWithABound) {
  std::vector<train::RewardSpec> specs(3);
  specs[0].name = "regex", specs[0].field = "pattern";
  specs[1].name = "format", specs[1].pattern = R"((?s)<think>.*</think>\s*(?P<answer>\d+))";
  specs[2].name = "format", specs[2].pattern = "a|ab";
  auto rewards = train::make_rewards(specs, 256);
  const std::string prompt = "p", where = "data.train record 1";
  auto regex = [&](const std::string& pattern, const std::string& completion) {
    const OrderedJson fields = {{"pattern", pattern}};
    return rewards[0]->score({prompt, completion, 3, fields, where});
  };
  auto format = [&](std::size_t f, const std::string& completion) {
    const OrderedJson fields = OrderedJson::object();
    return rewards[f]->score({prompt, completion, 3, fields, where});
  };
  EXPECT_EQ(regex("^b", "a\nb"), 0.0);  // ^: the start of the completion only, as re.search
  EXPECT_EQ(regex("(?m)^b", "a\nb"), 1.0);
  EXPECT_EQ(regex("a$", "xa\n"), 1.0);  // $: the end, or before a final newline
  EXPECT_EQ(regex("a.b", "a\nb"), 0.0);  // . stops at a newline without (?s)
  EXPECT_EQ(regex(R"((?P<x>a)(?P=x))", "caab"), 1.0);
  EXPECT_EQ(regex(R"(\d+)", "no digits"), 0.0);
  EXPECT_EQ(format(1, "<think>x\ny</think> 42"), 1.0);
  EXPECT_EQ(format(1, "<think>x</think> 42 and more"), 0.0);  // the whole completion
  EXPECT_EQ(format(2, "ab"), 1.0);  // not only the first alternative's length
  EXPECT_EQ(rewards[0]->take_errors(), 0);
  // Nested repetition that defeats the engine's shortcuts: ends at the bound, scores 0, counted.
  EXPECT_EQ(regex("(.|.)*(?!)", std::string(40, 'a')), 0.0);
  EXPECT_EQ(rewards[0]->take_errors(), 1);
  EXPECT_EQ(regex("(.|.)*QQQ", std::string(4000, 'a')), 0.0);
  EXPECT_THROW(regex("(unclosed", "x"), Error);
  // The last number is written in ASCII digits: others are not read as one.
  std::vector<train::RewardSpec> numeric(1);
  numeric[0].name = "numeric", numeric[0].field = "answer";
  auto n = train::make_rewards(numeric, 256);
  const OrderedJson seven = {{"answer", 7}};
  EXPECT_EQ(n[0]->score({prompt, "\xd9\xa1\xd9\xa2 is not it, 7 is", 3, seven, where}), 1.0);
  EXPECT_EQ(n[0]->score({prompt, "7 then \xd9\xa1\xd9\xa2", 3, seven, where}), 1.0);
}
