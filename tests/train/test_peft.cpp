// PEFT conformance and merge equivalence. Adapters written in PEFT's layout by an independent
// script (peft_reference.py) load in ctune and score as the script's own float64 merge does;
// adapters ctune writes are read by that script's own parser and score the same; and merging
// (W + s·B·A) reproduces base + adapter, for LoRA on all seven projections and rsLoRA.
// Tolerances: kNoiseFactor times the float32 noise of the NLLs compared, which the script
// measures for each adapter (docs/testing.md).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "infer/score.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/lora.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::noise_tolerance;
using ctune::test::within;

namespace {

const fs::path kData = CTUNE_TEST_DATA_DIR;
const fs::path kBase = kData / "train-reference" / "model";
const fs::path kPeft = kData / "peft-reference";
const std::vector<std::string> kProjections = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(PeftConformance, AdaptersWrittenByPeftLayoutScriptLoadAndScore) {
  const Json ref = read_json_file(kPeft / "reference.json");
  const auto ids = ref["ids"].get<std::vector<std::int64_t>>();
  for (const std::string variant : {"lora", "rslora"}) {
    auto lm = model::load_causal_lm(kBase, at::kFloat);
    const auto options = peft::load_adapter(lm, kPeft / variant);
    EXPECT_EQ(options.rank, 4);
    EXPECT_EQ(options.rslora, variant == "rslora");
    const double d = max_diff(infer::score_tokens(lm, ids, variant).nll, ref[variant].get<std::vector<double>>());
    EXPECT_TRUE(within(variant + ": PEFT-layout adapter in ctune vs the script's float64 merge: max |dNLL|", d,
                       noise_tolerance(ref["noise"][variant].get<double>())));
  }
}

// A LoRA on all seven projections with random A and B (B is zero after initialisation, which
// would make every check trivially pass).
model::CausalLM model_with_random_adapter(bool rslora, peft::LoraOptions* options) {
  auto lm = model::load_causal_lm(kBase, at::kFloat);
  options->rank = 4;
  options->alpha = 8.0;
  options->rslora = rslora;
  options->targets = kProjections;
  peft::apply_lora(lm, *options);
  at::manual_seed(rslora ? 5 : 4);
  at::NoGradGuard no_grad;
  for (auto& item : lm->named_parameters(true))
    if (item.key().find(".lora_B.") != std::string::npos) item.value().normal_(0.0, 0.3);
  return lm;
}

// What the independent script says of an adapter ctune wrote: the largest |dNLL| between its
// float64 merge and ctune's scores, and the float32 noise of those NLLs.
struct ScriptCheck {
  double max_diff = 0, noise = 0;
};

ScriptCheck check_with_script(model::CausalLM& lm, const peft::LoraOptions& options, const fs::path& dir,
                              const std::vector<std::int64_t>& ids) {
  peft::save_adapter(lm, options, dir, kBase.string(), /*overwrite=*/true);
  const fs::path scores = dir.string() + ".scores.json";
  std::ofstream(scores) << Json({{"ids", ids}, {"nll", infer::score_tokens(lm, ids, "ctune").nll}}).dump();
  const std::string cmd = std::string(CTUNE_PYTHON) + " " + CTUNE_PEFT_SCRIPT + " check " + kBase.string() + " " +
                          dir.string() + " " + scores.string();
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return {};
  ScriptCheck out;
  const int fields = std::fscanf(pipe, "%lf %lf", &out.max_diff, &out.noise);
  const int status = ::pclose(pipe);
  EXPECT_TRUE(fields == 2 && status == 0) << cmd;
  return out;
}

TEST(PeftConformance, AdaptersWrittenByCtuneReadByIndependentScript) {
  const Json ref = read_json_file(kPeft / "reference.json");
  const auto ids = ref["ids"].get<std::vector<std::int64_t>>();
  for (const bool rslora : {false, true}) {
    peft::LoraOptions options;
    auto lm = model_with_random_adapter(rslora, &options);
    const auto r = check_with_script(lm, options, kData / (rslora ? "ctune-adapter-rslora" : "ctune-adapter"), ids);
    EXPECT_TRUE(within(std::string(rslora ? "rslora" : "lora") + ": ctune-written adapter, the script's float64 merge "
                       "vs ctune: max |dNLL|", r.max_diff, noise_tolerance(r.noise)));
  }
}

// PEFT loads an adapter holding NaN, and every output is then NaN; ctune names the tensor.
TEST(PeftConformance, AdapterWithNonFiniteValuesIsRefused) {
  peft::LoraOptions options;
  auto lm = model_with_random_adapter(false, &options);
  {
    at::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters(true))
      if (item.key().find("layers.1.self_attn.v_proj.lora_B") != std::string::npos) item.value()[0][0] = NAN;
  }
  const fs::path dir = kData / "adapter-nan";
  peft::save_adapter(lm, options, dir, kBase.string(), /*overwrite=*/true);
  auto fresh = model::load_causal_lm(kBase, at::kFloat);
  try {
    peft::load_adapter(fresh, dir);
    ADD_FAILURE() << "an adapter holding NaN was loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.self_attn.v_proj.lora_B.weight\" holds non-finite values"), std::string::npos)
        << e.what();
  }
}

TEST(Merge, MergedModelEqualsBasePlusAdapter) {
  const Json ref = read_json_file(kPeft / "reference.json");
  const auto ids = ref["ids"].get<std::vector<std::int64_t>>();
  for (const bool rslora : {false, true}) {
    peft::LoraOptions options;
    auto lm = model_with_random_adapter(rslora, &options);
    const auto with_adapter = infer::score_tokens(lm, ids, "adapter").nll;
    // The float32 noise of these NLLs, for this very adapter.
    const double noise = check_with_script(lm, options, kData / (rslora ? "merge-input-rslora" : "merge-input"), ids).noise;
    EXPECT_EQ(peft::merge_lora(lm), 2u * 7);
    // Through the files a user gets: save the merged model, reload it, score.
    const fs::path dir = kData / (rslora ? "merged-rslora" : "merged-lora");
    model::SaveOptions save;
    save.overwrite = true;
    model::save_causal_lm(lm, dir, save);
    auto reloaded = model::load_causal_lm(dir, at::kFloat);
    for (const auto& item : reloaded->named_parameters(true)) EXPECT_EQ(item.key().find(".lora_"), std::string::npos);
    const double d = max_diff(infer::score_tokens(reloaded, ids, "merged").nll, with_adapter);
    // Two float32 evaluations (merged weights vs W x + s B A x), each within the noise: twice it.
    EXPECT_TRUE(within(std::string(rslora ? "rslora" : "lora") + " on 7 projections: merged vs base + adapter: max |dNLL|",
                       d, 2 * noise_tolerance(noise)));
  }
}

// An adapter trained on a Gemma 3 multimodal checkpoint (Gemma3ForConditionalGeneration) is
// named as PEFT names that class's modules: the text model under model.language_model., the
// head at the top (transformers >= 4.52); the older spelling (language_model.model.,
// language_model.lm_head.) loads too, with identical scores.
TEST(PeftConformance, Gemma3WrapperAdaptersUseTheWrapperModuleNames) {
  const fs::path base = kData / "models" / "gemma3_wrapper_untied_fp32";
  auto lm = model::load_causal_lm(base, at::kFloat);
  peft::LoraOptions options;
  options.rank = 4;
  options.alpha = 8.0;
  options.targets = {"all-linear", "lm_head"};
  peft::apply_lora(lm, options);
  at::manual_seed(6);
  {
    at::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters(true))
      if (item.key().find(".lora_B.") != std::string::npos) item.value().normal_(0.0, 0.3);
  }
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 64; ++i) ids.push_back((i * 37 + 11) % lm->config().vocab_size);
  const auto expected = infer::score_tokens(lm, ids, "wrapper + adapter").nll;
  const fs::path dir = kData / "ctune-adapter-gemma3-wrapper";
  peft::save_adapter(lm, options, dir, base.string(), /*overwrite=*/true);

  std::size_t layers = 0, head = 0;
  const auto written = io::SafetensorsFile::open(dir / peft::kAdapterWeights);
  for (const auto& info : written->header().tensors) {
    layers += info.name.rfind("base_model.model.model.language_model.layers.", 0) == 0;
    head += info.name.rfind("base_model.model.lm_head.lora_", 0) == 0;
  }
  EXPECT_EQ(head, 2u);
  EXPECT_EQ(layers + head, peft::adapter_state_dict(lm).size()) << "every adapter tensor under the wrapper's names";
  auto again = model::load_causal_lm(base, at::kFloat);
  peft::load_adapter(again, dir);
  EXPECT_EQ(infer::score_tokens(again, ids, "reloaded").nll, expected);

  // transformers < 4.52's spelling of the same modules.
  std::vector<std::pair<std::string, at::Tensor>> old_names;
  for (const auto& [name, t] : peft::adapter_state_dict(lm)) {
    const bool is_head = name.rfind("lm_head.", 0) == 0;
    old_names.emplace_back("base_model.model." + std::string(is_head ? "language_model.lm_head." : "language_model.model.") +
                               name.substr(is_head ? 8 : 6),
                           t.detach().contiguous());
  }
  std::vector<at::Tensor> keep;
  io::write_safetensors(dir / peft::kAdapterWeights, io::describe_tensors(old_names, &keep));
  auto old = model::load_causal_lm(base, at::kFloat);
  peft::load_adapter(old, dir);
  EXPECT_EQ(infer::score_tokens(old, ids, "older spelling").nll, expected);
}

TEST(PeftConformance, UnsupportedAdapterSettingsAreRefused) {
  const fs::path dir = kData / "peft-unsupported";
  for (const auto& [key, value, expect] : std::vector<std::tuple<std::string, Json, std::string>>{
           {"use_dora", true, "DoRA"},
           {"bias", "all", "bias"},
           {"fan_in_fan_out", true, "fan_in_fan_out"},
           {"target_modules", ".*proj", "regular expression"},
           {"peft_type", "IA3", "peft_type"},
           {"rank_pattern", Json{{"q_proj", 8}}, "rank_pattern"},
           {"modules_to_save", Json::array({"lm_head"}), "modules_to_save \"lm_head\" is not supported"},
           {"modules_to_save", "gate", "modules_to_save must be a list"}}) {
    fs::create_directories(dir);
    Json config = read_json_file(kPeft / "lora" / "adapter_config.json");
    config[key] = value;
    std::ofstream(dir / "adapter_config.json") << config.dump();
    try {
      peft::read_adapter_config(dir);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
}

}  // namespace
