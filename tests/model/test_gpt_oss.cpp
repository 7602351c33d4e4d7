// gpt-oss beyond the reference cases of test_model.cpp (which compare each checkpoint's per-token
// NLL with gpt_oss_reference.py's float64 forward): MXFP4 experts dequantise to exactly the
// reference's values, and malformed ones are refused naming the tensor; the checkpoint saves
// back byte for byte in the Hub's layout; decoding with the KV cache (sinks, windows) gives the
// full forward's logits; config defaults (GptOssConfig's) and refusals by name.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "io/hf_checkpoint.h"
#include "io/tensor_io.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "quant/mxfp4.h"
#include "cached_decode.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::noise_tolerance;
using ctune::test::within;

namespace {

const fs::path kModels = fs::path(CTUNE_TEST_DATA_DIR) / "models";

// A checkpoint tensor in its stored dtype.
at::Tensor stored(const io::CheckpointReader& c, const std::string& name) {
  const auto* ref = c.find(name);
  EXPECT_NE(ref, nullptr) << name;
  return ref ? io::load_tensor(*ref->file, *ref->info, io::to_scalar_type(ref->info->dtype, name)) : at::Tensor();
}

// The stacked experts of layer `i`.
model::StackedExpertsImpl& experts(model::CausalLM& lm, std::int64_t i) {
  return *lm->model->layers[i]->as<model::DecoderLayer>()->moe->stacked_experts;
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  const auto x = a.contiguous(), y = b.contiguous();
  return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Each expert matrix loaded from MXFP4 blocks and scales equals, bit for bit, what the reference
// script dequantises from the same bytes (transformers' convert_moe_packed_tensors), in bf16 as
// loaded and in fp32.
TEST(GptOss, Mxfp4ExpertsDequantiseExactly) {
  const std::string name = "gpt_oss_mxfp4_bf16";
  io::CheckpointReader dequantised(kModels / (name + ".dequantised"));
  ASSERT_EQ(dequantised.tensors().size(), 8u);  // 4 layers, gate_up_proj and down_proj
  for (const auto dtype : {at::kBFloat16, at::kFloat}) {
    auto lm = model::load_causal_lm(kModels / name, dtype);
    for (std::int64_t i = 0; i < 4; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".mlp.experts.";
      EXPECT_TRUE(same_bytes(experts(lm, i).gate_up_proj, stored(dequantised, p + "gate_up_proj").to(dtype))) << p << "gate_up_proj";
      EXPECT_TRUE(same_bytes(experts(lm, i).down_proj, stored(dequantised, p + "down_proj").to(dtype))) << p << "down_proj";
    }
  }
}

// Scales that do not fit their blocks are refused naming the tensor, expected against found: by
// the dequantiser, and by the loader before anything is read.
TEST(GptOss, Mxfp4ScalesThatDoNotFitAreRefusedByName) {
  const auto blocks = at::zeros({2, 64, 2, 16}, at::kByte);
  const auto msg = error_of([&] { quant::dequantize_mxfp4(blocks, at::zeros({2, 64, 3}, at::kByte), at::kFloat, "w"); });
  EXPECT_NE(msg.find("w_scales: expected uint8 [2, 64, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found Byte [2, 64, 3]"), std::string::npos) << msg;

  const std::string name = "gpt_oss_mxfp4_bf16";
  const fs::path bad = fs::path(CTUNE_TEST_DATA_DIR) / "gpt_oss_bad_scales";
  fs::remove_all(bad);
  fs::create_directories(bad);
  fs::copy_file(kModels / name / "config.json", bad / "config.json");
  io::CheckpointReader good(kModels / name);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const std::string victim = "model.layers.2.mlp.experts.down_proj_scales";
  for (const auto& [tensor, ref] : good.tensors()) {
    auto t = stored(good, tensor);
    tensors.emplace_back(tensor, tensor == victim ? t.narrow(2, 0, 1).contiguous() : t);
  }
  model::write_model_tensors(tensors, bad, 1ull << 40);
  const auto load = error_of([&] { model::load_causal_lm(bad, at::kFloat); });
  EXPECT_NE(load.find(victim), std::string::npos) << load;
  EXPECT_NE(load.find("expected [4,64,2] to match its blocks, found [4,64,1]"), std::string::npos) << load;
}

// Loaded and saved, the unquantised checkpoint comes back tensor for tensor with the same bytes
// under the Hub's names (stacked experts, router, sinks); the MXFP4 one comes back dense, its
// experts the dequantised values and its config.json no longer claiming MXFP4.
TEST(GptOss, SavesBackInTheHubLayout) {
  model::SaveOptions opts;
  opts.overwrite = true;
  {
    const std::string name = "gpt_oss_fp32";
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("rewritten_" + name);
    model::save_causal_lm(lm, out, opts);
    io::CheckpointReader before(kModels / name), after(out);
    EXPECT_EQ(after.tensors().size(), before.tensors().size());
    for (const auto& [tensor, ref] : before.tensors()) EXPECT_TRUE(same_bytes(stored(after, tensor), stored(before, tensor))) << tensor;
  }
  const std::string name = "gpt_oss_mxfp4_bf16";
  auto lm = model::load_causal_lm(kModels / name, at::kBFloat16);
  const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("rewritten_" + name);
  model::save_causal_lm(lm, out, opts);
  io::CheckpointReader dequantised(kModels / (name + ".dequantised")), after(out);
  for (const auto& [tensor, ref] : dequantised.tensors()) EXPECT_TRUE(same_bytes(stored(after, tensor), stored(dequantised, tensor))) << tensor;
  for (const auto& [tensor, ref] : after.tensors()) EXPECT_EQ(tensor.find("_blocks"), std::string::npos) << tensor;
  EXPECT_FALSE(read_json_file(out / "config.json").contains("quantization_config"));
}

// Prefill, then one token at a time with the KV cache (the sinks in every step's softmax, the
// sliding layers' window over the cached keys) gives the logits of one full forward, past the
// window (256 tokens, window 48).
TEST(GptOss, IncrementalDecodingMatchesFullForward) {
  const Json ref = read_json_file(kModels / "gpt_oss_fp32.reference.json");
  const auto ids = at::tensor(ref["ids"].get<std::vector<std::int64_t>>(), at::kLong).unsqueeze(0);
  auto lm = model::load_causal_lm(kModels / "gpt_oss_fp32", at::kFloat);
  // Both in fp32: a step's attention sums fewer keys in another order, ~1e-7 relative per
  // value; a wrong sink or window is O(1).
  EXPECT_TRUE(within("cached vs full logits, max |d| / max |logit|", test::cached_decode_difference(lm, ids, ids.size(1) - 40), 1e-5));
}

namespace {
// The reference's loss (gpt_oss_reference.mean_nll): the mean over the T - 1 predicted tokens of
// -log p, from fp32 logits.
at::Tensor mean_nll(model::CausalLM& lm, const std::vector<std::int64_t>& ids) {
  const auto x = at::tensor(ids, at::kLong).unsqueeze(0);
  const auto T = x.size(1);
  const auto logp = at::log_softmax(lm->forward(x), -1).narrow(1, 0, T - 1);
  return -logp.gather(-1, x.narrow(1, 1, T - 1).unsqueeze(-1)).mean();
}

// Every gradient named `prefix` + parameter in the reference against the model's, as the
// relative norm |g - ref| / |ref| within kNoiseFactor times its float32 noise.
void expect_gradients(model::CausalLM& lm, const io::CheckpointReader& ref, const Json& noise, const std::string& prefix,
                      std::size_t expected) {
  std::size_t compared = 0;
  double worst_ratio = 0;
  for (auto& item : lm->named_parameters(true)) {
    const auto* r = ref.find(prefix + item.key());
    if (!r) continue;
    ++compared;
    const auto want = io::load_tensor(*r->file, *r->info, at::kDouble);
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const double err = ((item.value().grad().to(at::kDouble) - want).norm() / want.norm()).item<double>();
    const double n = noise.at(prefix + item.key()).get<double>();
    worst_ratio = std::max(worst_ratio, err / n);
    EXPECT_TRUE(within(prefix + item.key() + ": |g - ref| / |ref|", err, noise_tolerance(n)));
  }
  EXPECT_EQ(compared, expected);
  std::printf("%s: %zu gradients, worst |g - ref| / |ref| = %.2f x its fp32 noise\n", prefix.c_str(), compared, worst_ratio);
}
}  // namespace

// Full fine-tuning and LoRA on attention against float64 autograd of the same loss
// (gpt_oss_reference.gradient_reference): through the blocked kernel's hand-written backward with
// sinks, the sliding windows, YaRN, the router's bias, the stacked experts' clamped SwiGLU.
TEST(GptOss, GradientsMatchReference) {
  const std::string name = "gpt_oss_fp32";
  const Json ids_json = read_json_file(kModels / (name + ".reference.json"))["ids"];
  const auto ids = ids_json.get<std::vector<std::int64_t>>();
  const Json info = read_json_file(kModels / (name + ".gradients.json"));
  io::CheckpointReader ref(kModels / (name + ".gradients"));
  {
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    peft::enable_full_finetune(lm);
    auto loss = mean_nll(lm, ids);
    EXPECT_TRUE(within("full loss", std::abs(loss.item<double>() - info["loss"].get<double>()),
                       noise_tolerance(info["noise"]["loss"].get<double>() * info["loss"].get<double>())));
    loss.backward();
    expect_gradients(lm, ref, info["noise"], "full.", lm->named_parameters(true).size());
  }
  auto lm = model::load_causal_lm(kModels / name, at::kFloat);
  peft::LoraOptions opts;
  opts.rank = info["lora_rank"].get<std::int64_t>();
  opts.alpha = info["lora_alpha"].get<double>();
  opts.targets = info["lora_targets"].get<std::vector<std::string>>();
  peft::apply_lora(lm, opts);
  std::size_t adapters = 0;
  {
    at::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters(true)) {
      if (const auto* r = ref.find("adapter." + item.key())) {
        item.value().copy_(io::load_tensor(*r->file, *r->info, at::kFloat));
        ++adapters;
      }
    }
  }
  ASSERT_EQ(adapters, 4u * 4u * 2u);  // 4 layers, q/k/v/o, A and B
  auto loss = mean_nll(lm, ids);
  EXPECT_TRUE(within("LoRA loss", std::abs(loss.item<double>() - info["lora_loss"].get<double>()),
                     noise_tolerance(info["noise"]["lora_loss"].get<double>() * info["lora_loss"].get<double>())));
  loss.backward();
  expect_gradients(lm, ref, info["noise"], "lora.", adapters);
}

namespace {
Json tiny_config() {
  return Json::parse(R"({"model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 32,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
    "num_experts_per_tok": 2})");
}

std::string refusal(const Json& j) {
  return error_of([&] { model::parse_model_config(j, "config.json"); });
}
}  // namespace

// GptOssConfig's defaults: head_dim 64, biases on q/k/v/o, sinks, sliding (128) on the even
// layers, YaRN factor 32 over 4096 (attention factor 0.1 ln 32 + 1, truncate false), theta
// 150000, the router's bias and softmax over the chosen k, swiglu_limit 7, alpha 1.702.
TEST(GptOss, ConfigDefaults) {
  const auto c = model::parse_model_config(tiny_config(), "config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.arch.qkv_bias && c.arch.o_bias && c.arch.attention_sinks && c.arch.norm_scale_fp32);
  EXPECT_EQ(c.arch.layer_windows, (std::vector<std::int64_t>{128, 0, 128, 0}));
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 150000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position, 4096);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_DOUBLE_EQ(c.rope.attention_factor, 0.1 * std::log(32.0) + 1.0);
  const auto& m = c.arch.moe;
  EXPECT_TRUE(m.router_bias && m.clamped_stacked_experts && m.normalize_top_k);
  EXPECT_EQ(m.experts, 4);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.intermediate, 32);
  EXPECT_EQ(c.intermediate_size, 0);  // no dense MLP anywhere
  EXPECT_EQ(c.mlp_width(), 2 * 32);   // a token runs through k experts
  EXPECT_DOUBLE_EQ(m.swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(m.swiglu_alpha, 1.702);
  EXPECT_EQ(c.arch.names.router, "router");
}

TEST(GptOss, BadConfigsAreRefusedByName) {
  Json short_list = tiny_config();
  short_list["layer_types"] = Json::parse(R"(["sliding_attention", "full_attention", "sliding_attention"])");
  EXPECT_NE(refusal(short_list).find("\"layer_types\" must list one entry per layer (4)"), std::string::npos) << refusal(short_list);
  Json unknown = tiny_config();
  unknown["use_bidirectional_attention"] = true;
  EXPECT_NE(refusal(unknown).find("key \"use_bidirectional_attention\" is not a gpt_oss key"), std::string::npos) << refusal(unknown);
  Json quant = tiny_config();
  quant["quantization_config"] = Json::parse(R"({"quant_method": "bitsandbytes"})");
  EXPECT_NE(refusal(quant).find("quantization_config.quant_method \"bitsandbytes\" is not supported for gpt_oss (expected \"mxfp4\")"),
            std::string::npos)
      << refusal(quant);
  Json rope = tiny_config();
  rope["rope_scaling"] = Json::parse(R"({"rope_type": "dynamic", "factor": 2.0})");
  EXPECT_NE(refusal(rope).find("rope type \"dynamic\" is not supported (supported: default, linear, llama3, longrope, yarn)"),
            std::string::npos)
      << refusal(rope);
  Json yarn = tiny_config();
  yarn["rope_scaling"] = Json::parse(R"({"rope_type": "yarn", "factor": -2.0})");
  EXPECT_NE(refusal(yarn).find("\"factor\" must be a positive number, found -2"), std::string::npos) << refusal(yarn);
}
