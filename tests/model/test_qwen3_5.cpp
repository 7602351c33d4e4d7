// Qwen3.5's hybrid decoder (and Qwen3-Next's, on the same blocks) beyond the reference cases of
// test_model.cpp (which compare each checkpoint's per-token NLL with make_reference.py's
// per-token recurrence): packed documents give each document's loss and gradients as trained
// alone, incremental decoding with the DeltaNet state gives the full forward's logits, left
// padding changes nothing, Qwen3-Next's fused projections load and save byte for byte, and the
// config refusals name the key.
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
#include "io/hf_checkpoint.h"
#include "io/tensor_io.h"
#include "model/decoder.h"
#include "model/gated_deltanet.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "cached_decode.h"
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
                                               "qwen3_5_moe_wrapper_bf16", "qwen3_next_fp32"};

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
  for (const std::string name : {"qwen3_5_text_fp32", "qwen3_5_moe_fp32", "qwen3_next_fp32"})
    expect_packed_gradients_as_alone(name);
}

// Prefill then one token at a time with the cache (conv and recurrent states in the DeltaNet
// layers, K and V in the attention layers) gives the logits of one full forward.
TEST(Qwen35, IncrementalDecodingMatchesFullForward) {
  double noise = 0;
  const auto [a, b] = read_packing("qwen3_5_text_fp32", &noise);
  (void)b;
  auto lm = model::load_causal_lm(kModels / "qwen3_5_text_fp32", at::kFloat);
  const auto ids = ids_tensor(a.ids);
  EXPECT_TRUE(within("cached vs full logits, max |d| / max |logit|", test::cached_decode_difference(lm, ids, ids.size(1) - 24), 1e-5));
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

// Qwen3-Next's checkpoint holds the DeltaNet's input projections fused, rows grouped per key
// head g: in_proj_qkvz [q_g (Dk) | k_g (Dk) | v_g (r Dv) | z_g (r Dv)] and in_proj_ba
// [b_g (r) | a_g (r)], r = Hv / Hk (transformers' fix_query_key_value_ordering). Loaded, each
// split projection holds exactly its rows; saved, every tensor of the file (the fused ones,
// experts one module each, everything else) comes back under its name with the same bytes, and
// no split name is written.
TEST(Qwen3Next, FusedProjectionsLoadSplitAndSaveByteForByte) {
  const std::string name = "qwen3_next_fp32";
  auto lm = model::load_causal_lm(kModels / name, at::kFloat);
  const model::LinearAttention& l = lm->config().arch.linear;
  ASSERT_EQ(l.key_heads, 2);
  ASSERT_EQ(l.value_heads, 4);
  const std::int64_t r = l.value_heads / l.key_heads, Dk = l.key_dim, Dv = l.value_dim;
  io::CheckpointReader before(kModels / name);
  auto stored = [&](io::CheckpointReader& c, const std::string& tensor) {
    const auto* ref = c.find(tensor);
    EXPECT_NE(ref, nullptr) << tensor;
    return ref ? io::load_tensor(*ref->file, *ref->info, io::to_scalar_type(ref->info->dtype, tensor)) : at::Tensor();
  };
  const auto qkvz = stored(before, "model.layers.0.linear_attn.in_proj_qkvz.weight").view({l.key_heads, -1, 64});
  const auto ba = stored(before, "model.layers.0.linear_attn.in_proj_ba.weight").view({l.key_heads, -1, 64});
  auto rows = [](const at::Tensor& grouped, std::int64_t from, std::int64_t n) { return grouped.narrow(1, from, n).reshape({-1, 64}); };
  const auto& layer = lm->model->layers[0]->as<model::DecoderLayer>()->linear_attn;
  ASSERT_TRUE(layer);
  EXPECT_TRUE(at::equal(layer->in_proj_qkv->weight, at::cat({rows(qkvz, 0, Dk), rows(qkvz, Dk, Dk), rows(qkvz, 2 * Dk, r * Dv)})));
  EXPECT_TRUE(at::equal(layer->in_proj_z->weight, rows(qkvz, 2 * Dk + r * Dv, r * Dv)));
  EXPECT_TRUE(at::equal(layer->in_proj_b->weight, rows(ba, 0, r)));
  EXPECT_TRUE(at::equal(layer->in_proj_a->weight, rows(ba, r, r)));

  const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("rewritten_" + name);
  model::SaveOptions opts;
  opts.overwrite = true;
  model::save_causal_lm(lm, out, opts);
  io::CheckpointReader after(out);
  EXPECT_EQ(after.tensors().size(), before.tensors().size());
  for (const auto& [tensor, ref] : after.tensors()) {
    EXPECT_EQ(tensor.find("in_proj_qkv."), std::string::npos) << tensor;
    EXPECT_NE(before.find(tensor), nullptr) << tensor << " written but not in the original";
  }
  for (const auto& [tensor, ref] : before.tensors()) {
    const auto got = stored(after, tensor), want = stored(before, tensor);
    ASSERT_TRUE(got.defined()) << tensor;
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << tensor;
    EXPECT_TRUE(at::equal(got, want)) << tensor;
  }
  const Json config = read_json_file(out / "config.json");
  EXPECT_EQ(config["model_type"], "qwen3_next");
  EXPECT_EQ(config["mlp_only_layers"], Json::array({2}));
}

namespace {
Json tiny_next_config() {
  return Json::parse(R"({"model_type": "qwen3_next", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 24,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48})");
}
}  // namespace

// Qwen3NextConfig's defaults and Qwen3NextDecoderLayer's MLP rule; refusals name the key.
TEST(Qwen3Next, ConfigDefaultsAndRefusals) {
  Json j = tiny_next_config();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = Json::array({3});
  auto c = model::parse_model_config(j, "config.json");
  EXPECT_EQ(c.arch.linear.layers, (std::vector<bool>{true, true, true, false}));  // full_attention_interval 4
  EXPECT_EQ(c.arch.moe.sparse_layers, (std::vector<bool>{false, true, false, false}));
  EXPECT_TRUE(c.arch.moe.normalize_top_k);  // norm_topk_prob true when absent
  EXPECT_EQ(c.arch.moe.shared_intermediate, 48);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_TRUE(c.arch.norm_offset && c.arch.attn_output_gate && c.arch.qk_norm);
  EXPECT_EQ(c.head_dim, 32);

  Json all_sparse = tiny_next_config();
  all_sparse.erase("intermediate_size");
  all_sparse["norm_topk_prob"] = false;
  c = model::parse_model_config(all_sparse, "config.json");
  EXPECT_EQ(c.intermediate_size, 0);  // no dense layer: nothing to size
  EXPECT_FALSE(c.arch.moe.normalize_top_k);
  Json dense_default = all_sparse;
  dense_default["mlp_only_layers"] = Json::array({0});
  EXPECT_EQ(model::parse_model_config(dense_default, "config.json").intermediate_size, 5632);  // Qwen3NextConfig's

  Json ungated = tiny_next_config();
  ungated["attn_output_gate"] = false;
  EXPECT_NE(refusal(ungated).find("attn_output_gate false is not supported for qwen3_next"), std::string::npos) << refusal(ungated);
  Json bad_layer = tiny_next_config();
  bad_layer["mlp_only_layers"] = Json::array({4});
  EXPECT_NE(refusal(bad_layer).find("\"mlp_only_layers\" entries must be layer indices 0..3, found 4"), std::string::npos)
      << refusal(bad_layer);
  Json bad_step = tiny_next_config();
  bad_step["decoder_sparse_step"] = 0;
  EXPECT_NE(refusal(bad_step).find("\"decoder_sparse_step\" must be >= 1, found 0"), std::string::npos) << refusal(bad_step);
}

// PEFT names Qwen3-Next's fused in_proj_qkvz / in_proj_ba: an adapter on the split parts would
// have no PEFT form, so naming one is refused and all-linear leaves them out.
TEST(Qwen3Next, LoraOnFusedPartsIsRefused) {
  auto lm = model::load_causal_lm(kModels / "qwen3_next_fp32", at::kFloat);
  try {
    peft::resolve_targets(lm, {"in_proj_qkv"});
    ADD_FAILURE() << "in_proj_qkv accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"in_proj_qkv\" is stored fused"), std::string::npos) << e.what();
  }
  const auto all = peft::resolve_targets(lm, {"all-linear"});
  for (const char* part : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"})
    EXPECT_EQ(std::find(all.begin(), all.end(), part), all.end()) << part;
  EXPECT_NE(std::find(all.begin(), all.end(), "out_proj"), all.end());
}
