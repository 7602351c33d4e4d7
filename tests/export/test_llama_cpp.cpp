// llama.cpp conformance: every case of conformance_cases.cpp, exported by `ctune export` and run
// through llama.cpp (node-llama-cpp 3.21.1) by the preparation step, must agree with ctune:
//   - llama.cpp's greedy continuation (its own temperature-0 sampler) equals ctune's greedy
//     generation (infer::generate, KV cache) for all 40 tokens (at least 32 are required to exist);
//   - at every step, llama.cpp's next-token probabilities equal ctune's softmax over the same
//     sequence within the case's tolerance (1e-3 for F32 files, F32 KV cache), over the whole
//     vocabulary, or over llama.cpp's 256 most likely tokens for 128k+ vocabularies;
//   - for real tokenizers, llama.cpp's tokenizer (built from the GGUF's tokenizer.ggml.* keys)
//     gives ctune's ids.
// ctune's side is the source model (plus its PEFT adapter, applied unmerged) for F32 files. For
// F16/BF16/Q8_0 files it is the model ctune rebuilds from the same file, multiplying as ggml does
// (BF16/Q8_0: activations rounded to the weight's dot-product type); the distance to the
// unrounded source is reported too. Two negative controls show the comparison has teeth: ctune
// without llama3 rope scaling, and Qwen2 without its biases, are both far outside the tolerance.
//
// `test_llama_cpp --prepare` is the CTest fixture that writes the models, exports and results.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
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
#include "peft/adapter_io.h"
#include "tokenizer/tokenizer.h"

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

// max |p_llama - p_ctune| and max |log p_llama - log p_ctune| over the tokens llama.cpp
// reported, all steps. The log form matters for 128k+ vocabularies, where every probability of
// a random model is below 1e-3.
struct ProbDiff {
  double p = 0, logp = 0;
};
ProbDiff max_prob_diff(const Json& llama_probs, const at::Tensor& probs) {
  ProbDiff worst;
  auto acc = probs.accessor<double, 2>();
  for (std::size_t k = 0; k < llama_probs.size() && static_cast<std::int64_t>(k) < probs.size(0); ++k) {
    for (const Json& entry : llama_probs[k]) {
      const auto id = entry[0].get<std::int64_t>();
      const double ours = acc[static_cast<std::int64_t>(k)][id], theirs = entry[1].get<double>();
      const double d = std::fabs(theirs - ours), dl = std::fabs(std::log(theirs) - std::log(ours));
      if (!(d <= worst.p)) worst.p = d;
      if (!(dl <= worst.logp)) worst.logp = dl;
    }
  }
  return worst;
}

// How ggml's CPU matmul (x86, AVX-512, the build node-llama-cpp runs here) treats the
// activations x for a weight stored as `weight`: BF16 and Q8_0 weights meet x converted to their
// dot-product type first (BF16 values; Q8_0 blocks of 32 along the row), F16 weights meet F32 x
// (llamafile's tinyBLAS multiplies F16 by F32 directly). nullopt: x stays F32.
std::optional<io::GgmlType> ggml_activation_type(io::GgmlType weight) {
  if (weight == io::GgmlType::BF16 || weight == io::GgmlType::Q8_0) return weight;
  return std::nullopt;
}

// A Linear that multiplies as ggml does: x rounded like ggml rounds it, then an fp32 product with
// the (already dequantized) weight. For Q8_0 the int8 block sums times both scales equal the
// product of the dequantized blocks, so this matches up to summation order.
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
// unmerged). Rounded files: the model rebuilt from the same file (the rounded weights), whose
// Linears round their inputs as ggml does; every tensor that needs it but token_embd (a row
// lookup, no matmul) must be such a Linear.
model::CausalLM reference_model(const ConformanceCase& c) {
  if (c.type == "f32") {
    auto lm = model::load_causal_lm(cases_dir() / c.model, at::kFloat);
    if (!c.adapter.empty()) peft::load_adapter(lm, cases_dir() / c.adapter);
    return lm;
  }
  const auto file = io::GgufFile::open(cases_dir() / c.gguf);
  auto lm = load_gguf_model(*file);
  std::set<std::string> emulated;
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get());
    const auto name = linear ? gguf_tensor_name(item.key() + ".weight") : std::nullopt;
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

  auto lm = reference_model(c);
  infer::GenerateOptions g;
  g.max_new_tokens = static_cast<std::int64_t>(llama_greedy.size());
  const auto ours = infer::generate(lm, prompt, g);
  std::size_t matched = 0;
  while (matched < ours.size() && matched < llama_greedy.size() && ours[matched] == llama_greedy[matched]) ++matched;
  EXPECT_EQ(matched, llama_greedy.size()) << c.name << ": greedy continuations diverge at token " << matched;

  const at::Tensor probs = ctune_probs(lm, prompt, llama_greedy);
  const ProbDiff dp = max_prob_diff(r["probs"], probs);
  EXPECT_LE(dp.p, c.prob_tolerance) << c.name;
  EXPECT_LE(dp.logp, c.logp_tolerance) << c.name;
  std::cout << "[llama.cpp] " << c.name << ": greedy " << matched << "/" << llama_greedy.size()
            << " tokens match, max |dp| " << dp.p << " (tolerance " << c.prob_tolerance << "), max |dlogp| " << dp.logp
            << " (tolerance " << c.logp_tolerance << "; "
            << (job["top"].get<int>() ? "top " + std::to_string(job["top"].get<int>()) : std::string("all")) << " tokens x "
            << llama_greedy.size() << " steps)";
  if (c.type != "f32") {
    auto source = model::load_causal_lm(cases_dir() / c.model, at::kFloat);
    const ProbDiff ds = max_prob_diff(r["probs"], ctune_probs(source, prompt, llama_greedy));
    std::cout << "; vs the unrounded source model: max |dp| " << ds.p << ", max |dlogp| " << ds.logp;
  }
  std::cout << std::endl;

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
// `spoil`, against llama.cpp's result for that case. Returns the distance, printed as `what`.
ProbDiff control_distance(const std::string& name, const std::string& model_dir,
                          const std::function<void(model::CausalLM&)>& spoil, const std::string& what) {
  const Json& results = load_json("results.json");
  if (!results.contains("results") || !results["results"].contains(name) || results["results"][name].contains("error")) {
    ADD_FAILURE() << "no llama.cpp result for " << name;
    return {};
  }
  const Json& r = results["results"][name];
  auto lm = model::load_causal_lm(cases_dir() / model_dir, at::kFloat);
  spoil(lm);
  const ProbDiff dp = max_prob_diff(r["probs"], ctune_probs(lm, job_of(name)["prompt"].get<std::vector<std::int64_t>>(),
                                                          r["greedy"].get<std::vector<std::int64_t>>()));
  std::cout << "[control] " << what << ": max |dp| " << dp.p << ", max |dlogp| " << dp.logp << std::endl;
  return dp;
}

// Without rope_freqs (ctune's unscaled frequencies) the probabilities are far from llama.cpp's:
// the llama3 case would have caught a missing or wrong rope_freqs tensor.
TEST(LlamaCppControls, Llama3RopeScalingMatters) {
  const ProbDiff dp = control_distance("llama3_rope_scaling_llama3_tokenizer", "llama3_rope", [](model::CausalLM& lm) {
    model::ModelConfig plain = lm->config();
    plain.rope.type = "default";
    lm->model->inv_freq = model::rope_inv_freq(plain);
  }, "llama3 case without rope scaling");
  EXPECT_GT(dp.logp, 0.1);
}

TEST(LlamaCppControls, Qwen2BiasesMatter) {
  const ProbDiff dp = control_distance("qwen2_biases_qwen3_tokenizer", "qwen2_qwen3tok", [](model::CausalLM& lm) {
    at::NoGradGuard no_grad;
    for (auto& [key, p] : model::hf_state_dict(lm))
      if (key.size() > 5 && key.compare(key.size() - 5, 5, ".bias") == 0) p.zero_();
  }, "qwen2 case without biases");
  EXPECT_GT(dp.logp, 0.1);
}

}  // namespace
}  // namespace ctune::exporter::test

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--prepare") == 0) return ctune::exporter::test::prepare_conformance();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
