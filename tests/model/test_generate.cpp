// Generation: the KV-cache decoder picks exactly the tokens a full forward pass over the whole
// sequence picks at every step, and the sampling processors follow Hugging Face's definitions
// (checked on hand-computed cases).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <filesystem>

#include "infer/generate.h"
#include "model/weights.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;

namespace {

const fs::path kModels = fs::path(CTUNE_TEST_DATA_DIR) / "models";

TEST(Generate, KvCacheMatchesFullRecompute) {
  for (const std::string name : {"llama_gqa_tied_bf16", "qwen2_bias", "llama3_rope"}) {
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    const std::vector<std::int64_t> prompt = {5, 17, 42, 9, 101, 77};
    infer::GenerateOptions o;
    o.max_new_tokens = 40;
    auto cached = infer::generate(lm, prompt, o);
    ASSERT_EQ(cached.size(), 40u) << name;
    // Reference: argmax of a full forward over prompt + generated so far, one step at a time.
    at::NoGradGuard no_grad;
    std::vector<std::int64_t> seq = prompt;
    for (std::size_t i = 0; i < cached.size(); ++i) {
      auto logits = lm->forward(at::tensor(seq, at::kLong).view({1, -1}))[0];
      auto last = logits[logits.size(0) - 1];
      EXPECT_EQ(last.argmax().item<std::int64_t>(), cached[i]) << name << " step " << i;
      seq.push_back(cached[i]);
    }
  }
}

TEST(Generate, StopsAtStopToken) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  infer::GenerateOptions o;
  o.max_new_tokens = 30;
  auto free_run = infer::generate(lm, {1, 2, 3}, o);
  ASSERT_GE(free_run.size(), 5u);
  o.stop_ids = {free_run[4]};
  auto stopped = infer::generate(lm, {1, 2, 3}, o);
  // Stops at the first occurrence of the stop token, which is not returned.
  auto first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(stopped, std::vector<std::int64_t>(free_run.begin(), free_run.begin() + first));
}

at::Tensor scores(std::vector<float> v) { return at::tensor(v, at::kFloat); }

TEST(Sampling, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  infer::SamplingOptions o;
  o.repetition_penalty = 2.0;
  auto out = infer::process_logits(scores({4.0f, -1.0f, 3.0f, 0.5f}), {0, 1, 1}, o);  // token 1 seen twice: once
  EXPECT_FLOAT_EQ(out[0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(out[1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(out[2].item<float>(), 3.0f);
  EXPECT_FLOAT_EQ(out[3].item<float>(), 0.5f);
}

TEST(Sampling, NoRepeatNgramBansContinuations) {
  infer::SamplingOptions o;
  o.no_repeat_ngram_size = 3;
  // History ... 7 8 9 ... 7 8 : the trigram 7 8 9 must not repeat, so 9 is banned.
  auto out = infer::process_logits(scores(std::vector<float>(12, 1.0f)), {7, 8, 9, 3, 7, 8}, o);
  EXPECT_TRUE(std::isinf(out[9].item<float>()));
  EXPECT_EQ((out == 1.0f).sum().item<std::int64_t>(), 11);
  // Fewer than n-1 tokens of history: no ban.
  auto early = infer::process_logits(scores(std::vector<float>(12, 1.0f)), {7}, o);
  EXPECT_EQ((early == 1.0f).sum().item<std::int64_t>(), 12);
}

TEST(Sampling, TemperatureTopKTopP) {
  infer::SamplingOptions o;
  o.do_sample = true;
  o.temperature = 2.0;
  o.top_k = 0;
  auto t = infer::process_logits(scores({2.0f, 4.0f}), {}, o);
  EXPECT_FLOAT_EQ(t[1].item<float>(), 2.0f);
  // top-k 2 keeps ties at the threshold: {5, 3, 3} survive, 1 goes.
  o.temperature = 1.0;
  o.top_k = 2;
  auto k = infer::process_logits(scores({1.0f, 5.0f, 3.0f, 3.0f}), {}, o);
  EXPECT_TRUE(std::isinf(k[0].item<float>()));
  EXPECT_EQ(at::isfinite(k).sum().item<std::int64_t>(), 3);
  // top-p 0.7 over probabilities {0.6, 0.3, 0.1}: the smallest set with mass >= 0.7 is {0.6, 0.3}.
  o.top_k = 0;
  o.top_p = 0.7;
  auto logp = at::log(at::tensor(std::vector<float>{0.6f, 0.3f, 0.1f}));
  auto p = infer::process_logits(logp, {}, o);
  EXPECT_TRUE(std::isfinite(p[0].item<float>()) && std::isfinite(p[1].item<float>()));
  EXPECT_TRUE(std::isinf(p[2].item<float>()));
  // A very small top-p still keeps the best token.
  o.top_p = 1e-6;
  EXPECT_EQ(at::isfinite(infer::process_logits(logp, {}, o)).sum().item<std::int64_t>(), 1);
}

TEST(Sampling, SamplingFollowsTheDistribution) {
  infer::SamplingOptions o;
  o.do_sample = true;
  o.top_k = 0;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto logp = at::log(at::tensor(std::vector<float>{0.5f, 0.3f, 0.2f}));
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 6000; ++i) ++counts[infer::choose_token(logp, o, gen)];
  // A frequency over n = 6000 draws has standard deviation sqrt(p (1 - p) / n) <= 0.0065; 0.03
  // is 4.6 of them (a chance of 4e-6 per token for a correct sampler). The generator is seeded,
  // so the counts are the same on every machine.
  const std::vector<double> p = {0.5, 0.3, 0.2};
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(ctune::test::within("token " + std::to_string(i) + ": |frequency - p|", std::abs(counts[i] / 6000.0 - p[i]), 0.03));
}

}  // namespace
