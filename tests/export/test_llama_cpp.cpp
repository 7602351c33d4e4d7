// llama.cpp conformance: every case of conformance_cases.cpp, exported by `ctune export` and run
// through llama.cpp (node-llama-cpp 3.22.1) by the preparation step, must agree with ctune:
//   - llama.cpp's greedy continuation (its own temperature-0 sampler) equals ctune's greedy
//     generation (infer::generate, KV cache) for all 40 tokens (at least 32 are required to exist);
//   - at every step, llama.cpp's next-token log-probabilities agree with ctune's over the whole
//     vocabulary, or over llama.cpp's 256 most likely tokens for 128k+ vocabularies. The
//     difference is split in two (ProbDiff): a shift common to a step's tokens, which is how a
//     different normalisation shows (llama.cpp divides by a float sum over the vocabulary: at
//     most V u32 off, the worst case of a V-term fp32 sum), and the spread about that shift,
//     which is the logits themselves. Tolerances, derived per case (docs/testing.md):
//       F32 files: spread within twice kNoiseFactor times the float32 noise of ctune's own
//         log-probabilities (measured here: fp32 forwards with weights moved by one ulp, against
//         a float64 forward), since both sides are one float32 evaluation each;
//       F16/BF16/Q8_0 files: ggml rounds activations to the weight's dot-product type on some
//         CPUs and kernels and not on others, and F16 kernels differ by CPU in ways ctune does
//         not reproduce (Intel: 4.9e-3 from F32 activations; AMD: 7e-3 from rounded ones).
//         ctune rebuilds the model from the file twice, with F32 activations and with
//         activations rounded as ggml's dot products do; their distance D is the whole effect
//         of activation rounding. F16: llama.cpp within 2 D of the nearer rebuild. BF16 and
//         Q8_0 (rounded by ggml on every x86 CPU): within 8 D sqrt(u32 / u) of the rounding
//         rebuild, the size of the roundings that fp32 sums can flip (u: the type's half step);
//         greedy tokens equal those of the rebuild compared;
//   - for real tokenizers, llama.cpp's tokenizer (built from the GGUF's tokenizer.ggml.* keys)
//     gives ctune's ids.
// That the rounded files hold exactly the rounded weights is the export self-check's job
// (0 difference, test_export_files.cpp). Two negative controls show the comparison has teeth:
// ctune without llama3 rope scaling, and Qwen2 without its biases, are both far outside.
//
// `test_llama_cpp --prepare` is the CTest fixture that writes the models, exports and results.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <set>

#include "conformance_cases.h"
#include "export/gguf_import.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "export_test_support.h"
#include "infer/generate.h"
#include "io/file.h"
#include "model/rope.h"
#include "model/weights.h"
#include "ops/cpu_kernels.h"
#include "peft/adapter_io.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "margins.h"

namespace ctune::exporter::test {
int prepare_conformance();

namespace {
namespace fs = std::filesystem;

fs::path cases_dir() { return data_dir() / "cases"; }

const Json& load_json(const std::string& file) {
  static std::map<std::string, Json> cache;
  auto it = cache.find(file);
  if (it != cache.end()) return it->second;
  const fs::path path = cases_dir() / file;
  if (!fs::exists(path)) {
    ADD_FAILURE() << path << " is missing: run the fixture step (ctest -R export_llama_cpp_prepare, or "
                  << "test_llama_cpp --prepare)";
    static const Json empty = Json::object();
    return empty;
  }
  return cache.emplace(file, Json::parse(io::read_text_file(path))).first->second;
}

Json job_of(const std::string& name) {
  for (const Json& j : load_json("jobs.json").value("cases", Json::array()))
    if (j["name"] == name) return j;
  return Json();
}

// p[k][v]: ctune's next-token probabilities after prompt + tokens[0..k-1], for each step k.
at::Tensor ctune_probs(model::CausalLM& lm, const std::vector<std::int64_t>& prompt,
                       const std::vector<std::int64_t>& tokens) {
  at::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end() - 1);
  auto ids = at::tensor(seq, at::TensorOptions().dtype(at::kLong)).view({1, -1});
  auto logits = lm->forward(ids).squeeze(0).to(at::kDouble);  // [T, V]
  const auto P = static_cast<std::int64_t>(prompt.size());
  return at::softmax(logits.narrow(0, P - 1, static_cast<std::int64_t>(tokens.size())), -1).contiguous();
}

// The tokens llama.cpp reported at each step, with its probability of each.
using Reported = std::vector<std::vector<std::pair<std::int64_t, double>>>;

Reported reported_of(const Json& llama_probs) {
  Reported out;
  for (const Json& step : llama_probs) {
    out.emplace_back();
    for (const Json& entry : step) out.back().emplace_back(entry[0].get<std::int64_t>(), entry[1].get<double>());
  }
  return out;
}

// The same tokens as `like`, with ctune's probabilities `probs` [steps, V].
Reported reported_of(const at::Tensor& probs, const Reported& like) {
  Reported out;
  auto acc = probs.accessor<double, 2>();
  for (std::size_t k = 0; k < like.size() && static_cast<std::int64_t>(k) < probs.size(0); ++k) {
    out.emplace_back();
    for (const auto& [id, p] : like[k]) out.back().emplace_back(id, acc[static_cast<std::int64_t>(k)][id]);
  }
  return out;
}

// Distances between two sets of next-token probabilities over the reported tokens, all steps:
//   shift   the largest |mean over a step's tokens of (log p_a - log p_b)|: a common factor,
//           how a different normalisation shows;
//   spread  the largest |log p_a - log p_b - that step's mean|: the logits themselves;
//   logp, p the largest |log p_a - log p_b| and |p_a - p_b| (information).
struct ProbDiff {
  double p = 0, logp = 0, shift = 0, spread = 0;
};
ProbDiff distance(const Reported& a, const at::Tensor& probs) {
  ProbDiff worst;
  const Reported b = reported_of(probs, a);
  auto keep_max = [](double& m, double v) {
    if (!(v <= m)) m = v;  // NaN propagates (and fails any tolerance)
  };
  for (std::size_t k = 0; k < b.size(); ++k) {
    std::vector<double> d;
    for (std::size_t i = 0; i < b[k].size(); ++i) {
      d.push_back(std::log(a[k][i].second) - std::log(b[k][i].second));
      keep_max(worst.p, std::fabs(a[k][i].second - b[k][i].second));
      keep_max(worst.logp, std::fabs(d.back()));
    }
    double mean = 0;
    for (double x : d) mean += x / static_cast<double>(d.size());
    keep_max(worst.shift, std::fabs(mean));
    for (double x : d) keep_max(worst.spread, std::fabs(x - mean));
  }
  return worst;
}

// ggml's f32 GELU (GGML_GELU_FP16, ggml-cpu's vec.h): x rounded to f16 and looked up in a table
// of f16 values, 0 below -10, x above 10. Its rounding moves Gemma's log-probabilities by ~1e-2,
// far past the float32 tolerance, so the Gemma references compute their GELU the same way.
at::Tensor ggml_gelu(const at::Tensor& x) {
  auto y = at::gelu(x.to(at::kHalf).to(at::kFloat), "tanh").to(at::kHalf).to(at::kFloat);
  y = at::where(x <= -10.0, at::zeros_like(y), y);
  y = at::where(x >= 10.0, x.to(at::kFloat), y);
  return y.to(x.scalar_type());
}

void use_ggml_gelu(model::CausalLM& lm) {
  if (lm->config().arch.activation != model::Activation::gelu_tanh) return;
  for (auto& layer : *lm->model->layers) layer->as<model::DecoderLayer>()->mlp->activation_override = ggml_gelu;
}

// The float32 noise of ctune's log-probabilities for the source model of `c` on this sequence:
// the RMS over 4 float32 forwards, each with every weight moved one ulp up or down at random, of
// the largest |log p32 - log p64| against a float64 forward (the idea of tests/fp32_noise.py).
double fp32_logp_noise(const ConformanceCase& c, const std::vector<std::int64_t>& prompt,
                       const std::vector<std::int64_t>& tokens) {
  auto load = [&](at::ScalarType dtype) {
    auto lm = model::load_causal_lm(cases_dir() / c.model, dtype);
    if (!c.adapter.empty()) peft::load_adapter(lm, cases_dir() / c.adapter);
    // With ggml's table GELU, the one-ulp moves also carry gate inputs across its f16 rounding
    // boundaries, as ctune's and llama.cpp's float32 sums do: the noise then includes those flips.
    use_ggml_gelu(lm);
    return lm;
  };
  auto exact_model = load(at::kDouble);
  const at::Tensor exact = ctune_probs(exact_model, prompt, tokens).log();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12345);
  double squares = 0;
  const int runs = 4;
  for (int r = 0; r < runs; ++r) {
    auto lm = load(at::kFloat);
    {
      at::NoGradGuard no_grad;
      for (auto& p : lm->parameters()) {
        auto up = at::empty(p.sizes(), p.options()).bernoulli_(0.5, gen).to(at::kBool);
        const auto inf = at::full({}, INFINITY, p.options());
        p.copy_(at::nextafter(p, at::where(up, inf, -inf)));
      }
    }
    const double d = (ctune_probs(lm, prompt, tokens).log() - exact).abs().max().item<double>();
    squares += d * d;
  }
  return std::sqrt(squares / runs);
}

// How ggml's CPU matmul may treat the activations x for a weight stored as `weight`: BF16 and
// Q8_0 weights meet x converted to their dot-product type first (BF16 values; Q8_0 blocks of 32
// along the row). F16 weights meet either F32 x (llamafile's tinyBLAS multiplies F16 by F32
// directly) or x rounded to F16 (ggml's F16 dot product), depending on the CPU and the kernel
// chosen. nullopt: x stays F32.
std::optional<io::GgmlType> ggml_activation_type(io::GgmlType weight) {
  if (weight == io::GgmlType::BF16 || weight == io::GgmlType::Q8_0 || weight == io::GgmlType::F16) return weight;
  return std::nullopt;
}

class GgmlMatmul : public model::LinearAdapter {
 public:
  GgmlMatmul(model::LinearImpl& owner, io::GgmlType activations) : owner_(owner), activations_(activations) {}
  at::Tensor apply(const at::Tensor& x, const at::Tensor&) override {
    return at::linear(round_trip(x, activations_), owner_.weight, owner_.bias);
  }

 private:
  model::LinearImpl& owner_;
  io::GgmlType activations_;
};

// The model llama.cpp must agree with. F32 files: the source model (plus its PEFT adapter,
// unmerged), its GELU as ggml's. Rounded files: the model rebuilt from the same file (the rounded weights); with
// `round_activations`, its Linears round their inputs as ggml's dot products do, and every
// tensor that needs it but token_embd (a row lookup, no matmul) must be such a Linear.
model::CausalLM reference_model(const ConformanceCase& c, bool round_activations = false) {
  if (c.type == "f32") {
    auto lm = model::load_causal_lm(cases_dir() / c.model, at::kFloat);
    if (!c.adapter.empty()) peft::load_adapter(lm, cases_dir() / c.adapter);
    use_ggml_gelu(lm);
    return lm;
  }
  const auto file = io::GgufFile::open(cases_dir() / c.gguf);
  auto lm = load_gguf_model(*file);
  use_ggml_gelu(lm);
  if (!round_activations) return lm;
  std::set<std::string> emulated;
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get());
    const auto name = linear ? gguf_tensor_name(lm->config(), item.key() + ".weight") : std::nullopt;
    const io::GgufTensorInfo* info = name ? file->header().find_tensor(*name) : nullptr;
    const auto activations = info ? ggml_activation_type(info->type) : std::nullopt;
    if (!activations) continue;
    linear->adapter = std::make_shared<GgmlMatmul>(*linear, *activations);
    emulated.insert(*name);
  }
  for (const auto& t : file->header().tensors) {
    if (ggml_activation_type(t.type) && t.name != "token_embd.weight") {
      EXPECT_TRUE(emulated.count(t.name)) << c.name << ": no ggml matmul emulation for " << t.name;
    }
  }
  return lm;
}

class LlamaCpp : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(LlamaCpp, AgreesWithCtune) {
  const ConformanceCase& c = GetParam();
  const Json& results = load_json("results.json");
  ASSERT_TRUE(results.contains("results") && results["results"].contains(c.name)) << "no llama.cpp result for " << c.name;
  const Json& r = results["results"][c.name];
  ASSERT_FALSE(r.contains("error")) << "llama.cpp refused " << c.gguf << ": " << r["error"].get<std::string>();
  const Json job = job_of(c.name);
  const auto prompt = job["prompt"].get<std::vector<std::int64_t>>();
  const auto llama_greedy = r["greedy"].get<std::vector<std::int64_t>>();
  ASSERT_GE(llama_greedy.size(), static_cast<std::size_t>(kMinGreedy)) << "llama.cpp stopped early (end-of-generation token)";

  const Reported llama = reported_of(r["probs"]);
  const bool rounded_file = c.type != "f32";
  // Rounded files: the rebuilds run ATen's element-wise arithmetic, one rounding per operation
  // as ggml's (ops/cpu_kernels.h, CompositeOpsOnly). With activations rounded to BF16, a few-ulp
  // difference in fp32 arithmetic (the fused kernels') moves some activations across a rounding
  // boundary, and each such step cascades through the later layers: measured 0.045 spread of
  // dlogp against 0.0002 here, for a D of 0.10. The fused kernels' own accuracy is tested
  // against float64 (test_kernels.cpp) and, on F32 files, against llama.cpp below.
  std::optional<ops::CompositeOpsOnly> composite;
  if (rounded_file) composite.emplace();
  // The reference: F32 files, the source model; rounded files, whichever of ctune's two rebuilds
  // (activations F32 or rounded as ggml's dot products do) llama.cpp is nearer to.
  auto lm = reference_model(c);
  at::Tensor probs = ctune_probs(lm, prompt, llama_greedy);
  ProbDiff dp = distance(llama, probs);
  double spread_tolerance = 0;
  std::string reference = "source model";
  if (!rounded_file) {
    // Both sides are one float32 evaluation each, so twice the float32 tolerance.
    spread_tolerance = 2 * ctune::test::noise_tolerance(fp32_logp_noise(c, prompt, llama_greedy));
  } else {
    auto rounding = reference_model(c, /*round_activations=*/true);
    const at::Tensor probs_rounding = ctune_probs(rounding, prompt, llama_greedy);
    // D: how far rounding every activation moves ctune's own rebuild.
    const double D = distance(reported_of(probs, llama), probs_rounding).spread;
    const ProbDiff dr = distance(llama, probs_rounding);
    bool rounded_reference = true;
    if (c.type == "f16") {
      // ggml's F16 kernels differ by CPU: whichever rebuild is nearer, within 2 D of it.
      spread_tolerance = 2 * D;
      rounded_reference = dr.spread < dp.spread;
    } else {
      // BF16/Q8_0: ggml rounds the activations on every x86 CPU. The rebuild reproduces those
      // roundings except where the two sides' fp32 sums leave an activation on the other side
      // of a rounding boundary: about a fraction u32 / u of them (u: the type's relative half
      // step), each moved by one step. D is the effect of moving all of them by up to a step,
      // added in quadrature, so the flips move log p by about D sqrt(u32 / u).
      const double u = c.type == "bf16" ? ctune::test::kUnitRoundoffBf16 : 1.0 / 254;  // Q8_0: amax / 127 steps
      spread_tolerance = ctune::test::kNoiseFactor * D * std::sqrt(ctune::test::kUnitRoundoffFp32 / u);
    }
    reference = rounded_reference ? "rebuilt from the file, activations rounded as ggml does"
                                  : "rebuilt from the file, F32 activations";
    if (rounded_reference) {
      lm = rounding;
      probs = probs_rounding;
      dp = dr;
    }
  }
  infer::GenerateOptions g;
  g.max_new_tokens = static_cast<std::int64_t>(llama_greedy.size());
  const auto ours = infer::generate(lm, prompt, g);
  std::size_t matched = 0;
  while (matched < ours.size() && matched < llama_greedy.size() && ours[matched] == llama_greedy[matched]) ++matched;
  EXPECT_EQ(matched, llama_greedy.size()) << c.name << ": greedy continuations diverge at token " << matched;

  const std::string what = c.name + " vs " + reference + " (" +
                           (job["top"].get<int>() ? "top " + std::to_string(job["top"].get<int>()) : std::string("all")) +
                           " tokens x " + std::to_string(llama_greedy.size()) + " steps, greedy " + std::to_string(matched) +
                           "/" + std::to_string(llama_greedy.size()) + ", max |dp| " + std::to_string(dp.p) + ")";
  EXPECT_TRUE(ctune::test::within(what + ": spread of dlogp", dp.spread, spread_tolerance));
  // llama.cpp's normalisation: a V-term float sum, at most V u32 relative off; plus the spread's
  // tolerance, part of which a step's mean keeps when it covers few tokens.
  const auto vocab = static_cast<double>(probs.size(1));
  EXPECT_TRUE(ctune::test::within(what + ": shift of dlogp", dp.shift,
                                  vocab * ctune::test::kUnitRoundoffFp32 + spread_tolerance));
  if (rounded_file) {
    auto source = model::load_causal_lm(cases_dir() / c.model, at::kFloat);
    const ProbDiff ds = distance(llama, ctune_probs(source, prompt, llama_greedy));
    std::cout << "[llama.cpp] " << c.name << " vs the unrounded source model: max |dp| " << ds.p << ", max |dlogp| "
              << ds.logp << " (information)" << std::endl;
  }

  if (c.tokenization) {
    auto tokenizer = tok::load_tokenizer(cases_dir() / c.model);
    const auto& texts = tokenization_texts();
    ASSERT_EQ(r["tokenize"].size(), texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const auto ids = tokenizer->encode(texts[i], /*add_special=*/false);
      EXPECT_EQ(r["tokenize"][i].get<std::vector<std::int32_t>>(), ids) << c.name << ": text " << i << ": " << texts[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaCpp, ::testing::ValuesIn(conformance_cases()),
                         [](const ::testing::TestParamInfo<ConformanceCase>& info) { return info.param.name; });

// A negative control: the source model of case `name` (in cases/`model_dir`), changed by
// `spoil`, against llama.cpp's result for that case: the spread of dlogp must be at least `far`
// (0.1: three orders of magnitude above the tolerance of the SwiGLU F32 cases; the Gemma cases,
// whose tolerance includes ggml's f16 GELU table, about 0.03 to 0.07, use 1).
void expect_control_far(const std::string& name, const std::string& model_dir,
                        const std::function<void(model::CausalLM&)>& spoil, const std::string& what, double far = 0.1) {
  const Json& results = load_json("results.json");
  if (!results.contains("results") || !results["results"].contains(name) || results["results"][name].contains("error")) {
    ADD_FAILURE() << "no llama.cpp result for " << name;
    return;
  }
  const Json& r = results["results"][name];
  auto lm = model::load_causal_lm(cases_dir() / model_dir, at::kFloat);
  use_ggml_gelu(lm);
  spoil(lm);
  const ProbDiff dp = distance(reported_of(r["probs"]), ctune_probs(lm, job_of(name)["prompt"].get<std::vector<std::int64_t>>(),
                                                                   r["greedy"].get<std::vector<std::int64_t>>()));
  EXPECT_TRUE(ctune::test::beyond(what + ": spread of dlogp", dp.spread, far));
}

// Without rope_freqs (ctune's unscaled frequencies) the probabilities are far from llama.cpp's:
// the llama3 case would have caught a missing or wrong rope_freqs tensor.
TEST(LlamaCppControls, Llama3RopeScalingMatters) {
  expect_control_far("llama3_rope_scaling_llama3_tokenizer", "llama3_rope", [](model::CausalLM& lm) {
    model::ModelConfig plain = lm->config();
    plain.rope.type = "default";
    lm->model->inv_freq = model::rope_inv_freq(plain);
  }, "llama3 case without rope scaling");
}

TEST(LlamaCppControls, Qwen2BiasesMatter) {
  expect_control_far("qwen2_biases_qwen3_tokenizer", "qwen2_qwen3tok", [](model::CausalLM& lm) {
    at::NoGradGuard no_grad;
    for (auto& [key, p] : model::hf_state_dict(lm))
      if (key.size() > 5 && key.compare(key.size() - 5, 5, ".bias") == 0) p.zero_();
  }, "qwen2 case without biases");
}

// The Gemma 2 file's soft-caps are read and applied: without ctune's, far from llama.cpp.
TEST(LlamaCppControls, Gemma2SoftCapsMatter) {
  expect_control_far("gemma2_caps_windows_f32", "gemma2_byte", [](model::CausalLM& lm) {
    for (auto& layer : *lm->model->layers) layer->as<model::DecoderLayer>()->self_attn->softcap = 0;
  }, "gemma2 case without the attention soft-cap", 1.0);
}

// llama.cpp's gemma3 rotates the local layers with theta 10000 and the global one with the
// file's theta and linear scaling: one table for all layers is far from it.
TEST(LlamaCppControls, Gemma3LocalRopeMatters) {
  expect_control_far("gemma3_local_global_f32", "gemma3_byte", [](model::CausalLM& lm) {
    lm->model->local_inv_freq = lm->model->inv_freq;
  }, "gemma3 case with the global RoPE on every layer", 1.0);
}

// The phi3 file's longrope is read: llama.cpp takes the long factors and scales cos/sin by the
// attention factor; ctune with the short factors, or without the factor, is far from it.
TEST(LlamaCppControls, Phi3LongFactorsMatter) {
  expect_control_far("phi3_longrope_partial_f32", "phi3_byte", [](model::CausalLM& lm) {
    lm->model->long_inv_freq = lm->model->inv_freq;
  }, "phi3 case with the short factors", 0.1);
}

TEST(LlamaCppControls, Phi3AttentionFactorMatters) {
  expect_control_far("phi3_longrope_partial_f32", "phi3_byte", [](model::CausalLM& lm) { lm->model->rope_scale = 1.0; },
                     "phi3 case without the attention factor", 0.1);
}

// llama.cpp's smollm3 skips RoPE on the 4th layer, as ctune does: rotating it is far from it.
TEST(LlamaCppControls, SmolLM3NoRopeLayerMatters) {
  expect_control_far("smollm3_nope_f32", "smollm3_byte", [](model::CausalLM& lm) {
    for (auto& layer : *lm->model->layers) layer->as<model::DecoderLayer>()->self_attn->use_rope = true;
  }, "smollm3 case with RoPE on every layer", 0.1);
}

// The MoE files' routing is read as ctune routes: llama.cpp's results are far from ctune's with
// the chosen experts' weights left unnormalised (qwen3moe's norm_topk_prob false), or with one
// expert per token instead of the file's two.
void for_each_moe(model::CausalLM& lm, const std::function<void(model::SparseMoeImpl&)>& f) {
  for (auto& layer : *lm->model->layers)
    if (auto& moe = layer->as<model::DecoderLayer>()->moe) f(*moe);
}

TEST(LlamaCppControls, Qwen3MoeRenormalisedWeightsMatter) {
  expect_control_far("qwen3moe_experts_f32", "qwen3moe_byte", [](model::CausalLM& lm) {
    for_each_moe(lm, [](model::SparseMoeImpl& moe) { moe.normalize = false; });
  }, "qwen3moe case without renormalised routing weights", 0.1);
}

TEST(LlamaCppControls, MixtralExpertsPerTokenMatter) {
  expect_control_far("mixtral_experts_f32", "mixtral_byte", [](model::CausalLM& lm) {
    for_each_moe(lm, [](model::SparseMoeImpl& moe) { moe.top_k = 1; });
  }, "mixtral case with one expert per token", 0.1);
}

// llama.cpp repeats the DeltaNet's key heads tiled (ggml_repeat), transformers grouped, so the
// file's value heads are reordered. ctune with its value heads moved the other way (what
// llama.cpp would compute from a file without the reorder) is far from llama.cpp.
TEST(LlamaCppControls, Qwen35ValueHeadOrderMatters) {
  expect_control_far("qwen35_hybrid_deltanet_f32", "qwen35_byte", [](model::CausalLM& lm) {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : model::hf_state_dict(lm)) {
      std::vector<model::GgufChange> tiles;
      for (const auto& change : gguf_changes(lm->config(), name))
        if (change.kind == model::GgufChange::Kind::tile_heads) tiles.push_back(change);
      p.copy_(undo_changes(p, tiles));
    }
  }, "qwen35 case with the value heads in transformers' order", 0.1);
}

// llama.cpp's qwen35moe adds the sigmoid-gated shared expert to the routed experts' sum, as ctune
// does: ctune without it is far from llama.cpp.
TEST(LlamaCppControls, Qwen35MoeSharedExpertMatters) {
  expect_control_far("qwen35moe_experts_f32", "qwen35moe_byte", [](model::CausalLM& lm) {
    for_each_moe(lm, [](model::SparseMoeImpl& moe) { moe.shared_expert = model::MLP(nullptr); });
  }, "qwen35moe case without the shared expert", 0.1);
}

}  // namespace
}  // namespace ctune::exporter::test

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--prepare") == 0) return ctune::exporter::test::prepare_conformance();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
