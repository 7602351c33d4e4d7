// Qwen3.5's hybrid decoder beyond the reference cases of test_model.cpp (which compare each
// checkpoint's per-token NLL with make_reference.py's per-token recurrence): packed documents
// give each document's loss and gradients as trained alone, incremental decoding with the
// DeltaNet state gives the full forward's logits, left padding changes nothing, and the config
// refusals name the key.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::noise_tolerance;
using ctune::test::within;

namespace {

const fs::path kModels = fs::path(CTUNE_TEST_DATA_DIR) / "models";

struct Document {
  std::vector<std::int64_t> ids;
  std::vector<double> nll;  // the reference's, the document alone
};

// <case>.packing.json: two documents and each one's reference NLL alone (make_reference.py).
std::pair<Document, Document> read_packing(const std::string& name, double* noise) {
  const Json j = read_json_file(kModels / (name + ".packing.json"));
  auto doc = [&](std::size_t i) {
    const Json& d = j.at("documents").at(i);
    return Document{d.at("ids").get<std::vector<std::int64_t>>(), d.at("nll").get<std::vector<double>>()};
  };
  *noise = j.at("nll_fp32_noise").get<double>();
  return {doc(0), doc(1)};
}

at::Tensor ids_tensor(const std::vector<std::int64_t>& ids) { return at::tensor(ids, at::kLong).unsqueeze(0); }

// Per-token NLL [T-1] of predicting ids[t+1] from the logits [1, T, V] (float64).
at::Tensor token_nll(const at::Tensor& logits, const at::Tensor& ids) {
  const auto T = ids.size(1);
  auto logp = at::log_softmax(logits.to(at::kDouble), -1).narrow(1, 0, T - 1);
  return -logp.gather(-1, ids.narrow(1, 1, T - 1).unsqueeze(-1)).squeeze(-1).squeeze(0);
}

// The NLL of both documents packed in one row (segment ids 1 and 2), each document's own
// tokens only: [len(a) - 1] and [len(b) - 1].
std::pair<at::Tensor, at::Tensor> packed_nll(model::CausalLM& lm, const Document& a, const Document& b) {
  std::vector<std::int64_t> row = a.ids;
  row.insert(row.end(), b.ids.begin(), b.ids.end());
  const auto na = static_cast<std::int64_t>(a.ids.size()), nb = static_cast<std::int64_t>(b.ids.size());
  auto seg = at::cat({at::full({1, na}, 1, at::kLong), at::full({1, nb}, 2, at::kLong)}, 1);
  model::ForwardInputs in;
  in.input_ids = ids_tensor(row);
  in.segment_ids = seg;
  // Positions restart with each document, as the packer writes them.
  in.position_ids = at::cat({at::arange(na, at::kLong), at::arange(nb, at::kLong)}).unsqueeze(0);
  auto logits = lm->logits(in);
  return {token_nll(logits.narrow(1, 0, na), ids_tensor(a.ids)), token_nll(logits.narrow(1, na, nb), ids_tensor(b.ids))};
}

double max_diff(const at::Tensor& x, const std::vector<double>& ref) {
  return (x.to(at::kDouble) - at::tensor(ref, at::kDouble)).abs().max().item<double>();
}

const std::vector<std::string> kQwen35Cases = {"qwen3_5_text_fp32", "qwen3_5_tied_bf16", "qwen3_5_moe_fp32",
                                               "qwen3_5_moe_wrapper_bf16"};

}  // namespace

// Each document of a packed row scores as the reference scores it alone.
TEST(Qwen35, PackedDocumentsScoreAsAlone) {
  for (const auto& name : kQwen35Cases) {
    double noise = 0;
    const auto [a, b] = read_packing(name, &noise);
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    at::NoGradGuard no_grad;
    const auto [na, nb] = packed_nll(lm, a, b);
    EXPECT_TRUE(within(name + ": packed document A: max |dNLL| vs A alone", max_diff(na, a.nll), noise_tolerance(noise)));
    EXPECT_TRUE(within(name + ": packed document B: max |dNLL| vs B alone", max_diff(nb, b.nll), noise_tolerance(noise)));
  }
}

namespace {
void expect_packed_gradients_as_alone(const std::string& name) {
  double noise = 0;
  const auto [a, b] = read_packing(name, &noise);
  auto lm = model::load_causal_lm(kModels / name, at::kDouble);
  lm->train();
  std::vector<at::Tensor> params;
  for (auto& p : lm->parameters()) {
    p.set_requires_grad(true);
    params.push_back(p);
  }
  auto grads_of = [&](const at::Tensor& loss) { return torch::autograd::grad({loss}, params, {}, false, false, true); };
  const auto [pa, pb] = packed_nll(lm, a, b);
  const auto packed = grads_of(pa.sum() + pb.sum());
  const auto alone_a = grads_of(token_nll(lm->forward(ids_tensor(a.ids)), ids_tensor(a.ids)).sum());
  const auto alone_b = grads_of(token_nll(lm->forward(ids_tensor(b.ids)), ids_tensor(b.ids)).sum());
  double worst = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::Tensor expected = at::zeros_like(params[i], at::kDouble);
    if (alone_a[i].defined()) expected += alone_a[i].to(at::kDouble);
    if (alone_b[i].defined()) expected += alone_b[i].to(at::kDouble);
    if (!packed[i].defined()) {  // an expert no token of either document was routed to
      ASSERT_EQ(expected.abs().max().item<double>(), 0.0) << name << ": parameter " << i << " got no gradient from the packed row";
      continue;
    }
    const double scale = std::max(expected.abs().max().item<double>(), 1e-3);
    worst = std::max(worst, (packed[i].to(at::kDouble) - expected).abs().max().item<double>() / scale);
  }
  // Relative to each tensor's largest gradient: float64 sums of a few hundred tokens' terms.
  EXPECT_TRUE(within(name + ": packed vs alone gradients (float64), max relative difference", worst, 1e-10));
}
}  // namespace

// Training on the packed row gives the sum of the gradients of the two documents trained alone:
// every parameter, in float64 so that a leak across the boundary (of order the gradients
// themselves) stands far above rounding (the sums differ only in order, ~1e-16 relative per
// term over a few hundred tokens).
TEST(Qwen35, PackedGradientsEqualEachDocumentAlone) {
  for (const std::string name : {"qwen3_5_text_fp32", "qwen3_5_moe_fp32"}) expect_packed_gradients_as_alone(name);
}

// Prefill then one token at a time with the cache (conv and recurrent states in the DeltaNet
// layers, K and V in the attention layers) gives the logits of one full forward.
TEST(Qwen35, IncrementalDecodingMatchesFullForward) {
  double noise = 0;
  const auto [a, b] = read_packing("qwen3_5_text_fp32", &noise);
  (void)b;
  auto lm = model::load_causal_lm(kModels / "qwen3_5_text_fp32", at::kFloat);
  at::NoGradGuard no_grad;
  const auto ids = ids_tensor(a.ids);
  const auto T = ids.size(1), prefill = T - 24;
  const auto full = lm->forward(ids);
  auto cache = lm->new_cache(T);
  model::ForwardInputs in;
  in.input_ids = ids.narrow(1, 0, prefill);
  in.cache = &cache;
  std::vector<at::Tensor> steps = {lm->logits(in)};
  for (std::int64_t t = prefill; t < T; ++t) {
    in.input_ids = ids.narrow(1, t, 1);
    steps.push_back(lm->logits(in));
  }
  EXPECT_EQ(cache.length(), T);
  const double diff = (at::cat(steps, 1) - full).abs().max().item<double>();
  const double scale = full.abs().max().item<double>();
  EXPECT_TRUE(within("cached vs full logits, max |d| / max |logit|", diff / scale, 1e-5));
}

// A left-padded row (attention mask 0 on the padding) gives the unpadded row's logits.
TEST(Qwen35, LeftPaddingChangesNothing) {
  double noise = 0;
  const auto [a, b] = read_packing("qwen3_5_text_fp32", &noise);
  (void)b;
  auto lm = model::load_causal_lm(kModels / "qwen3_5_text_fp32", at::kFloat);
  at::NoGradGuard no_grad;
  const auto ids = ids_tensor(a.ids);
  const std::int64_t T = ids.size(1), pad = 13;
  auto padded = at::cat({at::full({1, pad}, 7, at::kLong), ids}, 1);
  auto mask = at::cat({at::zeros({1, pad}, at::kLong), at::ones({1, T}, at::kLong)}, 1);
  const auto alone = token_nll(lm->forward(ids), ids);
  const auto with_pad = token_nll(lm->forward(padded, mask).narrow(1, pad, T), ids);
  EXPECT_TRUE(within("left-padded vs alone: max |dNLL|", (alone - with_pad).abs().max().item<double>(), noise_tolerance(noise)));
}

namespace {
Json tiny_config() {
  return Json::parse(R"({"model_type": "qwen3_5_text", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 24,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]})");
}

std::string refusal(const Json& j) {
  try {
    model::parse_model_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Qwen35, ConfigDefaultsAndLayerKinds) {
  Json j = tiny_config();
  j.erase("layer_types");
  j["full_attention_interval"] = 2;
  const auto c = model::parse_model_config(j, "config.json");
  EXPECT_EQ(c.arch.linear.layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);  // Qwen3_5TextConfig's default
  EXPECT_EQ(c.rope.rotary_dim(c.head_dim), 8);
  EXPECT_TRUE(c.arch.norm_offset);
  EXPECT_TRUE(c.arch.attn_output_gate);
  EXPECT_EQ(c.projection("q_proj").out, 2 * 4 * 32);
  EXPECT_EQ(c.arch.linear.conv_channels(), 2 * 2 * 16 + 4 * 24);
}

TEST(Qwen35, BadConfigsAreRefusedByName) {
  Json unknown = tiny_config();
  unknown["layer_types"][1] = "sliding_attention";
  EXPECT_NE(refusal(unknown).find("layer_types entry \"sliding_attention\""), std::string::npos) << refusal(unknown);
  Json short_list = tiny_config();
  short_list["layer_types"].erase(0);
  EXPECT_NE(refusal(short_list).find("one entry per layer (4), found 3 entries"), std::string::npos) << refusal(short_list);
  Json indivisible = tiny_config();
  indivisible["linear_num_value_heads"] = 3;
  EXPECT_NE(refusal(indivisible).find("linear_num_value_heads (3) must be a multiple of linear_num_key_heads (2)"),
            std::string::npos)
      << refusal(indivisible);
  Json rope = tiny_config();
  rope["rope_parameters"] = Json::parse(R"({"rope_type": "yarn", "factor": 4.0})");
  EXPECT_NE(refusal(rope).find("rope type \"yarn\" is not supported"), std::string::npos) << refusal(rope);
}

// The MoE variant's own keys: the experts' and the shared expert's widths, the expert count and
// the experts per token, each refused by name with what was found.
TEST(Qwen35, BadMoeConfigsAreRefusedByName) {
  const auto moe = [] {
    Json j = tiny_config();
    j["model_type"] = "qwen3_5_moe_text";
    j.erase("intermediate_size");
    j["num_experts"] = 8, j["num_experts_per_tok"] = 2, j["moe_intermediate_size"] = 32, j["shared_expert_intermediate_size"] = 48;
    return j;
  };
  EXPECT_EQ(refusal(moe()), "");
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["moe_intermediate_size"] = 0; }, "\"moe_intermediate_size\" must be in 1..65536, found 0"},
      {[](Json& j) { j["shared_expert_intermediate_size"] = -4; }, "\"shared_expert_intermediate_size\" must be in 1..65536, found -4"},
      {[](Json& j) { j["num_experts"] = 0; }, "\"num_experts\" must be positive for qwen3_5_moe_text, found 0"},
      {[](Json& j) { j["num_experts_per_tok"] = 9; }, "\"num_experts_per_tok\" must be between 1 and num_experts (8)"},
  };
  for (const auto& [change, expected] : cases) {
    Json j = moe();
    change(j);
    EXPECT_NE(refusal(j).find(expected), std::string::npos) << "expected \"" << expected << "\" in: " << refusal(j);
  }
}

// No position sees a later token: changing the last tokens of a row leaves every earlier
// position's logits as they were, packed or not, in one sequence and in a padded batch.
TEST(Qwen35, LaterTokensChangeNoEarlierLogit) {
  auto lm = model::load_causal_lm(kModels / "qwen3_5_text_fp32", at::kFloat);
  at::NoGradGuard no_grad;
  const std::int64_t T = 150, keep = 97;
  auto ids = at::randint(0, 300, {2, T}, at::kLong);
  auto changed = ids.clone();
  changed.narrow(1, keep, T - keep).random_(0, 300);
  const auto before = lm->forward(ids).narrow(1, 0, keep);
  const auto after = lm->forward(changed).narrow(1, 0, keep);
  EXPECT_EQ((before - after).abs().max().item<double>(), 0.0);
  model::ForwardInputs in;
  in.segment_ids = at::cat({at::full({2, 60}, 1, at::kLong), at::full({2, T - 60}, 2, at::kLong)}, 1);
  in.position_ids = at::cat({at::arange(60, at::kLong), at::arange(T - 60, at::kLong)}).unsqueeze(0).expand({2, T});
  in.input_ids = ids;
  const auto packed_before = lm->logits(in).narrow(1, 0, keep);
  in.input_ids = changed;
  const auto packed_after = lm->logits(in).narrow(1, 0, keep);
  EXPECT_EQ((packed_before - packed_after).abs().max().item<double>(), 0.0);
}
