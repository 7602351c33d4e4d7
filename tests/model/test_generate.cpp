// Generation: the KV-cache decoder picks exactly the tokens a full forward pass over the whole
// sequence picks at every step, and the sampling processors follow Hugging Face's definitions
// (checked on hand-computed cases).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "infer/beam_search.h"
#include "infer/generate.h"
#include "model/parameter_shapes.h"
#include "model/weights.h"
#include "train/forecast/memory_ledger.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;

namespace {

const fs::path kModels = fs::path(CTUNE_TEST_DATA_DIR) / "models";

// Batched, left-padded prompts of different lengths with the preallocated cache pick, for 256
// new tokens, exactly the tokens of a full forward pass over each sequence alone at every step.
// float64 weights keep the comparison about the cache, padding and positions, not about which of
// two nearly tied logits rounding favours.
TEST(Generate, BatchedKvCacheMatchesFullRecompute) {
  // The last three: windows shorter than the 256 new tokens, on every layer or on some.
  for (const std::string name : {"llama_mha_fp32", "llama_gqa_tied_bf16", "qwen2_bias", "qwen3_gqa_tied_bf16",
                                 "mistral_window_bf16", "qwen2_window_layers", "qwen3_layer_types", "smollm3_nope_bf16",
                                 "gemma2_caps_window_bf16", "gemma3_pattern_bf16", "phi3_short_tied_bf16"}) {
    auto lm = model::load_causal_lm(kModels / name, at::kDouble);
    const std::vector<std::vector<std::int64_t>> prompts = {{5, 17, 42}, {9, 101, 77, 3, 250, 11, 64, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}};
    infer::GenerateOptions o;
    o.max_new_tokens = 256;
    infer::GenerateStats stats;
    const auto cached = infer::generate(lm, prompts, o, &stats);
    ASSERT_EQ(cached.size(), prompts.size());
    EXPECT_EQ(stats.prefill_tokens, 24);
    EXPECT_EQ(stats.decode_tokens, 3 * 255);
    at::NoGradGuard no_grad;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      ASSERT_EQ(cached[p].ids.size(), 256u) << name;
      EXPECT_EQ(cached[p].stop_reason, "length");
      std::vector<std::int64_t> seq = prompts[p];
      std::size_t agree = 0;
      for (; agree < cached[p].ids.size(); ++agree) {
        auto logits = lm->forward(at::tensor(seq, at::kLong).view({1, -1}))[0];
        if (logits[logits.size(0) - 1].argmax().item<std::int64_t>() != cached[p].ids[agree]) break;
        seq.push_back(cached[p].ids[agree]);
      }
      EXPECT_EQ(agree, 256u) << name << " prompt " << p << ": the cached decoder departs from full recompute at new token " << agree;
    }
  }
}

// Beam search returns, token for token, what the independent beam search of
// tests/model/beam_reference.py (PyTorch, full recompute per beam, one prompt at a time, Hugging
// Face's BeamSearchScorer rules) returns: num_beams 2-5, length penalties -1, 0.5, 1 and 2, early
// stopping true/false/"never", two eos ids that greedy decoding picks early (so hypotheses do
// finish), penalties, and no eos at all. Here both prompts run as one left-padded batch with the
// KV cache, in float64 so no near-tie decides.
// Tried: leaving the eos token out of a finished hypothesis' generated_len makes it fail.
TEST(Generate, BeamSearchMatchesIndependentReference) {
  for (const std::string name : {"llama_mha_fp32", "llama_gqa_tied_bf16", "qwen2_bias"}) {
    auto lm = model::load_causal_lm(kModels / name, at::kDouble);
    const Json runs = read_json_file(kModels / (name + ".beam.json"));
    ASSERT_GE(runs.size(), 6u);
    std::int64_t finished_by_eos = 0;
    for (const auto& run : runs) {
      infer::GenerateOptions o;
      o.num_beams = run["num_beams"].get<std::int64_t>();
      o.length_penalty = run["length_penalty"].get<double>();
      o.max_new_tokens = run["max_new_tokens"].get<std::int64_t>();
      o.stop_ids = run["eos_ids"].get<std::vector<std::int64_t>>();
      const auto& es = run["early_stopping"];
      o.early_stopping = es.is_string() ? infer::EarlyStopping::never : es.get<bool>() ? infer::EarlyStopping::first : infer::EarlyStopping::heuristic;
      o.sampling.repetition_penalty = run.value("repetition", 1.0);
      o.sampling.no_repeat_ngram_size = run.value("no_repeat_ngram", 0);
      const auto prompts = run["prompts"].get<std::vector<std::vector<std::int64_t>>>();
      const auto got = infer::generate(lm, prompts, o);
      const std::string what = name + " " + run.dump().substr(0, 120);
      ASSERT_EQ(got.size(), prompts.size());
      for (std::size_t p = 0; p < prompts.size(); ++p) {
        const auto& want = run["outputs"][p];
        EXPECT_EQ(got[p].ids, want["ids"].get<std::vector<std::int64_t>>()) << what << " prompt " << p;
        EXPECT_EQ(got[p].stop_reason, want["eos"].get<bool>() ? "eos" : "length") << what << " prompt " << p;
        // Rotary angles are float32 on both sides (as in Hugging Face) but computed in another
        // order, so the float64 sums agree to ~1e-8 relative, not to the last bit.
        const double score = want["score"].get<double>();
        EXPECT_NEAR(got[p].score, score, 1e-6 * std::abs(score)) << what << " prompt " << p;
        finished_by_eos += got[p].stop_reason == "eos";
      }
    }
    EXPECT_GE(finished_by_eos, 2) << name << ": the fixtures should exercise finished hypotheses";
  }
}

// One beam is greedy decoding: the beam search code with num_beams 1 picks greedy's tokens.
TEST(Generate, OneBeamIsGreedy) {
  auto lm = model::load_causal_lm(kModels / "qwen2_bias", at::kDouble);
  const std::vector<std::vector<std::int64_t>> prompts = {{5, 17, 42}, {9, 101, 77, 3, 250, 11, 64, 2}};
  infer::GenerateOptions o;
  o.max_new_tokens = 40;
  const auto greedy = infer::generate(lm, prompts, o);
  const auto beam = infer::beam_search(lm, prompts, o);
  for (std::size_t p = 0; p < prompts.size(); ++p) EXPECT_EQ(beam[p].ids, greedy[p].ids) << "prompt " << p;
}

// The cache holds only the KV heads, in the projections' dtype, for the requested capacity.
TEST(Generate, CacheIsPreallocatedPerKvHead) {
  auto lm = model::load_causal_lm(kModels / "llama_gqa_tied_bf16", at::kFloat);
  lm->set_compute_dtype(at::kBFloat16);
  auto cache = lm->new_cache(40);
  at::NoGradGuard no_grad;
  model::ForwardInputs in;
  in.input_ids = at::tensor(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, at::kLong).view({2, 3});
  in.cache = &cache;
  lm->logits(in);
  const auto& k = cache.layers[0].k;
  EXPECT_EQ(k.sizes().vec(), (std::vector<std::int64_t>{2, lm->config().num_key_value_heads, 40, lm->config().head_dim}));
  EXPECT_EQ(k.scalar_type(), at::kBFloat16);
  EXPECT_EQ(cache.length(), 3);
  const auto* before = k.data_ptr();
  in.input_ids = at::tensor(std::vector<std::int64_t>{7, 8}, at::kLong).view({2, 1});
  lm->logits(in);
  EXPECT_EQ(cache.layers[0].k.data_ptr(), before) << "appending must write in place, not reallocate";
  EXPECT_EQ(cache.length(), 4);

  // The generation ledger's KV line is these buffers' bytes (bf16 storage, computed as stored).
  auto stored = model::load_causal_lm(kModels / "llama_gqa_tied_bf16", at::kBFloat16);
  auto bf16_cache = stored->new_cache(40);
  model::ForwardInputs first;
  first.input_ids = at::tensor(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, at::kLong).view({2, 3});
  first.cache = &bf16_cache;
  stored->logits(first);
  std::int64_t held = 0;
  for (const auto& layer : bf16_cache.layers) held += static_cast<std::int64_t>(layer.k.nbytes() + layer.v.nbytes());
  const train::GenerationLedgerInputs shape{stored->config(), model::parameter_count(model::parameter_shapes(*stored)), at::kBFloat16, /*batch=*/2, /*prompt_tokens=*/3, /*new_tokens=*/37};
  const auto ledger = train::estimate_generation_memory(shape);
  const auto kv = std::find_if(ledger.lines.begin(), ledger.lines.end(), [](const auto& l) { return l.name == "kv_cache"; });
  ASSERT_NE(kv, ledger.lines.end());
  EXPECT_EQ(kv->bytes, held);
}

TEST(Generate, RefusesPromptsPastTheContext) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  infer::GenerateOptions o;
  o.max_new_tokens = 10;
  const std::vector<std::int64_t> long_prompt(static_cast<std::size_t>(lm->config().max_position_embeddings - 5), 7);
  try {
    infer::generate(lm, long_prompt, o);
    FAIL() << "a prompt whose generation runs past the context was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("past the model's context"), std::string::npos) << e.what();
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

// A model whose forward yields NaN (here a NaN final norm) is refused by name at the first step,
// greedy, sampled and beam alike: greedy decoding used to repeat token 0, sampling to end in
// torch's unlocated multinomial error, and beam search to return its first candidates.
TEST(Generate, RefusesNonFiniteLogits) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  {
    at::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters(true))
      if (item.key() == "model.norm.weight") item.value().fill_(NAN);
  }
  infer::GenerateOptions o;
  o.max_new_tokens = 4;
  const auto expect_refused = [](const std::function<void()>& run, const std::string& what) {
    try {
      run();
      ADD_FAILURE() << what << ": NaN logits accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("NaN or +inf"), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_refused([&] { infer::generate(lm, {1, 2, 3}, o); }, "greedy");
  expect_refused([&] { infer::beam_search(lm, {{1, 2, 3}}, o); }, "beam search");
  o.sampling.do_sample = true;
  o.sampling.temperature = 0.8;
  expect_refused([&] { infer::generate(lm, {1, 2, 3}, o); }, "sampling");
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

// The distribution sampling draws from, derived here from the definitions (docs/formats.md
// "Processors") in double: logits / T, keep the top k (ties at the k-th stay), softmax, keep the
// most likely tokens until their mass reaches top_p, renormalise.
std::vector<double> filtered_softmax(const std::vector<double>& logits, double T, std::size_t k, double top_p) {
  std::vector<double> z;
  for (double l : logits) z.push_back(l / T);
  std::vector<double> sorted = z;
  std::sort(sorted.rbegin(), sorted.rend());
  const double kth = sorted[k - 1];
  std::vector<double> p(z.size(), 0.0);
  double total = 0;
  for (std::size_t i = 0; i < z.size(); ++i)
    if (z[i] >= kth) total += p[i] = std::exp(z[i]);
  std::vector<std::size_t> order(z.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  double mass = 0, kept = 0;
  for (auto i : order) {
    if (mass >= top_p) {
      p[i] = 0;
      continue;
    }
    mass += p[i] / total;
    kept += p[i];
  }
  for (double& q : p) q /= kept;
  return p;
}

// Draws at a fixed seed follow the filtered softmax: a chi-square test over the kept tokens at
// the 0.1% level, and no filtered token is ever drawn. The seeded generator makes the counts the
// same on every machine, so the test is deterministic; the 0.1% level says a correct sampler
// would fail it for one seed in a thousand, not that this one might flake.
TEST(Sampling, FrequenciesMatchTheFilteredSoftmax) {
  const std::vector<double> logits = {2.0, 1.6, 1.3, 1.0, 0.8, 0.5, 0.3, 0.1, -0.2, -0.5, -1.0, -2.0};
  struct Case {
    double T;
    std::int64_t k;
    double top_p;
  };
  // 0.999 quantiles of chi-square with 1 .. 11 degrees of freedom.
  const double critical[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588, 31.264};
  for (const Case c : {Case{1.0, 0, 1.0}, Case{0.7, 6, 1.0}, Case{1.3, 8, 0.8}, Case{0.8, 0, 0.9}}) {
    infer::SamplingOptions o;
    o.do_sample = true;
    o.temperature = c.T;
    o.top_k = c.k;
    o.top_p = c.top_p;
    const auto p = filtered_softmax(logits, c.T, c.k > 0 ? static_cast<std::size_t>(c.k) : logits.size(), c.top_p);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
    const auto scores = infer::process_logits(at::tensor(std::vector<float>(logits.begin(), logits.end())), {}, o);
    const int n = 40000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(infer::choose_token(scores, o, gen))];
    double chi2 = 0;
    int categories = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "token " << i << " is filtered out (T " << c.T << ", k " << c.k << ", p " << c.top_p << ")";
        continue;
      }
      ++categories;
      const double expected = n * p[i];
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    ASSERT_GE(categories, 2);
    EXPECT_TRUE(ctune::test::within("chi-square (T " + std::to_string(c.T) + ", k " + std::to_string(c.k) + ", p " +
                                        std::to_string(c.top_p) + ", " + std::to_string(categories - 1) + " dof)",
                                    chi2, critical[categories - 2]));
  }
}

// Output generated under no_repeat_ngram_size n never holds the same n-gram twice (prompt
// included), greedy and sampled, where unconstrained greedy decoding of this model loops.
TEST(Sampling, NoRepeatNgramOutputNeverRepeats) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  const std::vector<std::int64_t> prompt = {5, 17, 42, 17, 42};
  auto repeats = [](const std::vector<std::int64_t>& seq, std::size_t n) {
    std::set<std::vector<std::int64_t>> seen;
    for (std::size_t i = 0; i + n <= seq.size(); ++i)
      if (!seen.insert(std::vector<std::int64_t>(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.begin() + static_cast<std::ptrdiff_t>(i + n))).second) return true;
    return false;
  };
  infer::GenerateOptions o;
  o.max_new_tokens = 150;
  auto with_prompt = [&](const std::vector<std::int64_t>& ids) {
    auto seq = prompt;
    seq.insert(seq.end(), ids.begin(), ids.end());
    return seq;
  };
  EXPECT_TRUE(repeats(with_prompt(infer::generate(lm, prompt, o)), 3)) << "greedy decoding alone should repeat (else the test shows nothing)";
  for (const std::int64_t n : {2, 3}) {
    o.sampling.no_repeat_ngram_size = n;
    o.sampling.do_sample = false;
    // The prompt repeats the bigram (17, 42) itself; generated text must add no repeat beyond it.
    const auto greedy = with_prompt(infer::generate(lm, prompt, o));
    EXPECT_FALSE(repeats(std::vector<std::int64_t>(greedy.begin() + (n == 2 ? 3 : 0), greedy.end()), static_cast<std::size_t>(n))) << "greedy, n " << n;
    o.sampling.do_sample = true;
    o.seed = 11;
    const auto sampled = with_prompt(infer::generate(lm, prompt, o));
    EXPECT_FALSE(repeats(std::vector<std::int64_t>(sampled.begin() + (n == 2 ? 3 : 0), sampled.end()), static_cast<std::size_t>(n))) << "sampled, n " << n;
  }
}

// Temperature towards 0 is greedy; the same seed gives the same sample, another seed another.
TEST(Sampling, ColdSamplingIsGreedyAndSeedsReproduce) {
  auto lm = model::load_causal_lm(kModels / "qwen2_bias", at::kDouble);
  const std::vector<std::vector<std::int64_t>> prompts = {{5, 17, 42}, {9, 101, 77, 3}};
  infer::GenerateOptions o;
  o.max_new_tokens = 32;
  const auto greedy = infer::generate(lm, prompts, o);
  o.sampling.do_sample = true;
  o.sampling.temperature = 1e-6;  // any gap between the two best logits above ~1e-4 makes the draw certain
  const auto cold = infer::generate(lm, prompts, o);
  for (std::size_t p = 0; p < prompts.size(); ++p) EXPECT_EQ(cold[p].ids, greedy[p].ids) << "prompt " << p;
  o.sampling.temperature = 1.0;
  o.sampling.top_k = 0;
  o.seed = 7;
  const auto a = infer::generate(lm, prompts, o), b = infer::generate(lm, prompts, o);
  o.seed = 8;
  const auto other = infer::generate(lm, prompts, o);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_EQ(a[p].ids, b[p].ids) << "prompt " << p << ": the same seed must give the same sample";
    EXPECT_NE(a[p].ids, other[p].ids) << "prompt " << p << ": another seed gave the same 32 tokens";
  }
}

}  // namespace
