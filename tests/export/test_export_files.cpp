// Exported files, inspected with ctune's GGUF reader: the metadata keys and their types, tensor
// names and reversed dims, the Q/K permutation (llama) and its absence (qwen2), biases,
// rope_freqs, storage types per --type, LoRA adapter layout, and the self-check's behaviour
// (a failing check leaves no file behind).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <cstring>
#include <set>
#include <tuple>

#include "core/error.h"
#include "export/gguf_export.h"
#include "export/gguf_import.h"
#include "export/gguf_metadata.h"
#include "export/gguf_tensors.h"
#include "export_test_support.h"
#include "io/file.h"
#include "io/gguf.h"
#include "io/tensor_io.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/lora.h"
#include "tokenizer/tokenizer.h"
#include "margins.h"

namespace ctune::exporter::test {
namespace {
namespace fs = std::filesystem;

TEST(GgufExportFiles, LlamaMetadataTensorsAndPermutation) {
  const fs::path dir = fresh_dir("files-llama");
  TinyConfig c;
  c.rope_scaling = Json{{"rope_type", "linear"}, {"factor", 2.0}};
  make_model(dir / "m", c, "byte", 5);
  const auto report = export_model(dir / "m", dir / "m.gguf", "f32");
  EXPECT_EQ(report.check.max_diff, 0.0);
  EXPECT_FALSE(report.check.vs_source.has_value());  // f32: checked against the source itself
  auto f = io::GgufFile::open(dir / "m.gguf");
  const io::GgufHeader& h = f->header();
  const std::string w = "m.gguf";
  auto u32 = [&](const std::string& key) {
    const io::GgufValue& v = h.require(key, w);
    EXPECT_EQ(v.type(), io::GgufValueType::UINT32) << key;
    return v.as_int(w);
  };
  auto f32 = [&](const std::string& key) {
    const io::GgufValue& v = h.require(key, w);
    EXPECT_EQ(v.type(), io::GgufValueType::FLOAT32) << key;
    return v.as_float(w);
  };
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.require("general.architecture", w).as_string(w), "llama");
  EXPECT_EQ(h.require("general.type", w).as_string(w), "model");
  EXPECT_EQ(u32("general.file_type"), 0);
  EXPECT_EQ(u32("llama.context_length"), 256);
  EXPECT_EQ(u32("llama.embedding_length"), 64);
  EXPECT_EQ(u32("llama.block_count"), 2);
  EXPECT_EQ(u32("llama.feed_forward_length"), 128);
  EXPECT_EQ(u32("llama.attention.head_count"), 4);
  EXPECT_EQ(u32("llama.attention.head_count_kv"), 2);
  EXPECT_EQ(u32("llama.rope.dimension_count"), 16);
  EXPECT_EQ(u32("llama.vocab_size"), 272);
  EXPECT_FLOAT_EQ(f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f32("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(h.require("llama.rope.scaling.type", w).as_string(w), "linear");
  EXPECT_EQ(f32("llama.rope.scaling.factor"), 2.0);
  EXPECT_EQ(h.require("tokenizer.ggml.model", w).as_string(w), "gpt2");
  EXPECT_EQ(h.require("tokenizer.ggml.pre", w).as_string(w), "gpt-2");
  EXPECT_EQ(h.require("tokenizer.ggml.tokens", w).size(), 272u);
  EXPECT_EQ(h.require("tokenizer.ggml.token_type", w).type(), io::GgufValueType::INT32);
  EXPECT_EQ(u32("tokenizer.ggml.bos_token_id"), 256);
  EXPECT_EQ(u32("tokenizer.ggml.eos_token_id"), 257);
  EXPECT_TRUE(h.require("tokenizer.ggml.add_bos_token", w).as_bool(w));
  EXPECT_FALSE(h.require("tokenizer.ggml.add_eos_token", w).as_bool(w));

  std::set<std::string> names;
  for (const auto& t : h.tensors) {
    names.insert(t.name);
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    EXPECT_EQ(t.type, io::GgmlType::F32) << t.name;
  }
  std::set<std::string> expected = {"token_embd.weight", "output_norm.weight", "output.weight"};
  for (int i = 0; i < 2; ++i)
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"})
      expected.insert("blk." + std::to_string(i) + "." + n + ".weight");
  EXPECT_EQ(names, expected);
  EXPECT_EQ(h.find_tensor("token_embd.weight")->ne, (std::vector<std::int64_t>{64, 272}));
  EXPECT_EQ(h.find_tensor("blk.0.attn_k.weight")->ne, (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(h.find_tensor("blk.0.ffn_down.weight")->ne, (std::vector<std::int64_t>{128, 64}));

  const at::Tensor q = hf_tensor(dir / "m", "model.layers.1.self_attn.q_proj.weight");
  const at::Tensor k = hf_tensor(dir / "m", "model.layers.1.self_attn.k_proj.weight");
  const at::Tensor v = hf_tensor(dir / "m", "model.layers.1.self_attn.v_proj.weight");
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.attn_q.weight").equal(permute_qk_rows(q, 4)));
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.attn_k.weight").equal(permute_qk_rows(k, 2)));
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.attn_v.weight").equal(v));
  EXPECT_FALSE(gguf_tensor(*f, "blk.1.attn_q.weight").equal(q));
}

TEST(GgufExportFiles, Qwen2BiasesAreNotPermutedAndTiedHeadIsAbsent) {
  const fs::path dir = fresh_dir("files-qwen2");
  TinyConfig c;
  c.model_type = "qwen2";
  c.tie = true;
  make_model(dir / "m", c, "byte", 6);
  export_model(dir / "m", dir / "m.gguf", "f32");
  auto f = io::GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(f->header().require("general.architecture", "t").as_string("t"), "qwen2");
  EXPECT_EQ(f->header().find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->header().find_tensor("blk.0.attn_output.bias"), nullptr);
  for (const char* p : {"q", "k", "v"}) {
    const std::string hf = std::string("model.layers.0.self_attn.") + p + "_proj.";
    EXPECT_TRUE(gguf_tensor(*f, std::string("blk.0.attn_") + p + ".bias").equal(hf_tensor(dir / "m", hf + "bias"))) << p;
    EXPECT_TRUE(gguf_tensor(*f, std::string("blk.0.attn_") + p + ".weight").equal(hf_tensor(dir / "m", hf + "weight"))) << p;
  }
}

TEST(GgufExportFiles, Llama3RopeFreqsAndLlamaBiasesPermuted) {
  const fs::path dir = fresh_dir("files-llama3");
  TinyConfig c;
  c.rope_scaling = Json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 32}};
  make_model(dir / "m", c, "byte", 7);
  // attention_bias on a llama config: q/k/v/o biases, q/k permuted like their weights.
  Json config = Json::parse(ctune::io::read_text_file(dir / "m" / "config.json"));
  config["attention_bias"] = true;
  {
    auto cfg = model::parse_model_config(config, "test");
    model::CausalLM lm(cfg, at::kFloat);
    at::manual_seed(9);
    at::NoGradGuard no_grad;
    for (auto& [name, p] : model::hf_state_dict(lm)) p.normal_(0.0, 0.125);
    model::SaveOptions save;
    save.overwrite = true;
    model::save_causal_lm(lm, dir / "b", save, [](const fs::path& s) { tok::write_byte_tokenizer(s); });
  }
  const auto report = export_model(dir / "m", dir / "m.gguf", "f32");
  // The f32 file against its source: the same fp32 weights, only float reassociation (merge,
  // rebuilt RoPE factors) differs; the export's own threshold (self_check.h).
  EXPECT_TRUE(ctune::test::within("f32 self-check: max |dNLL|", report.check.max_diff, kNllTolerance));
  auto f = io::GgufFile::open(dir / "m.gguf");
  const io::GgufTensorInfo* freqs = f->header().find_tensor("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  EXPECT_EQ(freqs->ne, (std::vector<std::int64_t>{8}));
  EXPECT_EQ(freqs->type, io::GgmlType::F32);
  const at::Tensor factors = decode_tensor(*f, *freqs);
  EXPECT_EQ(factors[0].item<float>(), 1.0f);   // wavelength 2*pi < 8: unchanged
  EXPECT_EQ(factors[7].item<float>(), 8.0f);   // long wavelength: divided by the factor
  EXPECT_EQ(f->header().find("llama.rope.scaling.type"), nullptr);

  export_model(dir / "b", dir / "b.gguf", "f32");
  auto fb = io::GgufFile::open(dir / "b.gguf");
  EXPECT_TRUE(gguf_tensor(*fb, "blk.0.attn_q.bias").equal(permute_qk_rows(hf_tensor(dir / "b", "model.layers.0.self_attn.q_proj.bias"), 4)));
  EXPECT_TRUE(gguf_tensor(*fb, "blk.0.attn_k.bias").equal(permute_qk_rows(hf_tensor(dir / "b", "model.layers.0.self_attn.k_proj.bias"), 2)));
  EXPECT_TRUE(gguf_tensor(*fb, "blk.0.attn_output.bias").equal(hf_tensor(dir / "b", "model.layers.0.self_attn.o_proj.bias")));
}

TEST(GgufExportFiles, StorageTypesPerExportType) {
  const fs::path dir = fresh_dir("files-types");
  make_model(dir / "m", TinyConfig{}, "byte", 10);
  const at::Tensor up = hf_tensor(dir / "m", "model.layers.0.mlp.up_proj.weight");
  for (const std::string type : {"f16", "bf16", "q8_0"}) {
    const auto report = export_model(dir / "m", dir / (type + ".gguf"), type);
    // The file against the source rounded the same way in memory: equal up to float noise.
    EXPECT_TRUE(ctune::test::within(type + " self-check vs the rounded source: max |dNLL|", report.check.max_diff, kNllTolerance));
    ASSERT_TRUE(report.check.vs_source.has_value()) << type;
    std::cout << "[self-check] --type " << type << ": max |dNLL| " << report.check.max_diff
              << " against the rounded source (tolerance " << report.check.tolerance << "), "
              << report.check.vs_source->max_diff << " against the unrounded source (information)" << std::endl;
    auto f = io::GgufFile::open(dir / (type + ".gguf"));
    const io::GgmlType want = parse_gguf_type(type, "t");
    for (const auto& t : f->header().tensors)
      EXPECT_EQ(t.type, t.ne.size() == 2 ? want : io::GgmlType::F32) << type << " " << t.name;
    const io::GgufTensorInfo* info = f->header().find_tensor("blk.0.ffn_up.weight");
    ASSERT_NE(info, nullptr);
    const auto expected = io::encode_ggml(want, up.contiguous().data_ptr<float>(), static_cast<std::size_t>(up.numel()));
    EXPECT_EQ(std::memcmp(f->data(*info), expected.data(), expected.size()), 0) << type;
    EXPECT_EQ(f->header().require("general.file_type", "t").as_int("t"), gguf_file_type(want));
  }
  auto q8 = io::GgufFile::open(dir / "q8_0.gguf");
  EXPECT_EQ(q8->header().require("general.quantization_version", "t").as_int("t"), 2);
}

TEST(GgufExportFiles, LoraAdapterLayout) {
  const fs::path dir = fresh_dir("files-lora");
  make_model(dir / "m", TinyConfig{}, "byte", 30);
  make_adapter(dir / "m", dir / "a", {"q_proj", "k_proj", "v_proj", "lm_head"}, 31, /*rslora=*/true);
  GgufExportOptions o;
  o.model_dir = dir / "m";
  o.adapter_dir = dir / "a";
  o.out = dir / "a.gguf";
  const auto report = export_gguf_lora(o);
  // The f32 file against its source: the same fp32 weights, only float reassociation (merge,
  // rebuilt RoPE factors) differs; the export's own threshold (self_check.h).
  EXPECT_TRUE(ctune::test::within("f32 self-check: max |dNLL|", report.check.max_diff, kNllTolerance));
  auto f = io::GgufFile::open(dir / "a.gguf");
  const auto& h = f->header();
  EXPECT_EQ(h.require("general.type", "t").as_string("t"), "adapter");
  EXPECT_EQ(h.require("adapter.type", "t").as_string("t"), "lora");
  EXPECT_EQ(h.require("general.architecture", "t").as_string("t"), "llama");
  EXPECT_FLOAT_EQ(static_cast<float>(h.require("adapter.lora.alpha", "t").as_float("t")), 8.0f * 2.0f);  // alpha * sqrt(4)
  EXPECT_EQ(h.tensors.size(), 2u * (3 * 2 + 1));
  const io::GgufTensorInfo* a = h.find_tensor("blk.0.attn_q.weight.lora_a");
  const io::GgufTensorInfo* b = h.find_tensor("blk.0.attn_q.weight.lora_b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->ne, (std::vector<std::int64_t>{64, 4}));  // PyTorch [r, in]
  EXPECT_EQ(b->ne, (std::vector<std::int64_t>{4, 64}));  // PyTorch [out, r]
  const std::string file = "adapter_model.safetensors", pre = "base_model.model.model.layers.0.self_attn.";
  EXPECT_TRUE(decode_tensor(*f, *a).equal(hf_tensor(dir / "a", pre + "q_proj.lora_A.weight", file)));
  EXPECT_TRUE(decode_tensor(*f, *b).equal(permute_qk_rows(hf_tensor(dir / "a", pre + "q_proj.lora_B.weight", file), 4)));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.attn_v.weight.lora_b").equal(hf_tensor(dir / "a", pre + "v_proj.lora_B.weight", file)));
  EXPECT_NE(h.find_tensor("output.weight.lora_a"), nullptr);

  o.type = io::GgmlType::Q8_0;
  EXPECT_THROW(export_gguf_lora(o), ConfigError);

  o.type = io::GgmlType::BF16;
  o.out = dir / "a.bf16.gguf";
  const auto rounded = export_gguf_lora(o);
  EXPECT_TRUE(ctune::test::within("bf16 adapter self-check vs the rounded adapter: max |dNLL|", rounded.check.max_diff,
                                  kNllTolerance));
  ASSERT_TRUE(rounded.check.vs_source.has_value());
  std::cout << "[self-check] bf16 LoRA: " << rounded.check.vs_source->max_diff << " against the unrounded adapter"
            << std::endl;
  auto fb = io::GgufFile::open(dir / "a.bf16.gguf");
  EXPECT_EQ(fb->header().find_tensor("blk.0.attn_q.weight.lora_b")->type, io::GgmlType::BF16);
}

// Qwen3-MoE: each sparse layer's experts stacked per projection ([experts, out, in], ne reversed)
// in expert order, the router as ffn_gate_inp, the expert keys; Q8_0 rows of the stacks pass the
// self-check like 2-D weights; what llama.cpp's qwen3moe cannot express is refused before any
// file is written.
TEST(GgufExportFiles, ExpertsStackedPerProjection) {
  const fs::path dir = fresh_dir("files-moe");
  TinyConfig moe;
  moe.model_type = "qwen3_moe";
  moe.head_dim = 16;
  moe.extra = {{"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}, {"norm_topk_prob", true}};
  make_model(dir / "m", moe, "byte", 40);
  const auto report = export_model(dir / "m", dir / "m.gguf", "f32");
  EXPECT_EQ(report.architecture, "qwen3moe");
  EXPECT_TRUE(ctune::test::within("f32 self-check: max |dNLL|", report.check.max_diff, kNllTolerance));
  auto f = io::GgufFile::open(dir / "m.gguf");
  const auto& h = f->header();
  EXPECT_EQ(h.require("qwen3moe.expert_count", "t").as_int("t"), 4);
  EXPECT_EQ(h.require("qwen3moe.expert_used_count", "t").as_int("t"), 2);
  EXPECT_EQ(h.require("qwen3moe.expert_feed_forward_length", "t").as_int("t"), 32);
  EXPECT_EQ(h.require("qwen3moe.feed_forward_length", "t").as_int("t"), 128);
  ASSERT_NE(h.find_tensor("blk.1.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(h.find_tensor("blk.1.ffn_gate_inp.weight")->ne, (std::vector<std::int64_t>{64, 4}));
  EXPECT_EQ(h.find_tensor("blk.1.ffn_gate_exps.weight")->ne, (std::vector<std::int64_t>{64, 32, 4}));
  EXPECT_EQ(h.find_tensor("blk.1.ffn_up_exps.weight")->ne, (std::vector<std::int64_t>{64, 32, 4}));
  EXPECT_EQ(h.find_tensor("blk.1.ffn_down_exps.weight")->ne, (std::vector<std::int64_t>{32, 64, 4}));
  EXPECT_EQ(h.find_tensor("blk.1.ffn_gate.weight"), nullptr);
  const at::Tensor down = gguf_tensor(*f, "blk.1.ffn_down_exps.weight");
  for (int e = 0; e < 4; ++e)
    EXPECT_TRUE(down[e].equal(hf_tensor(dir / "m", "model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight"))) << e;
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ffn_gate_inp.weight").equal(hf_tensor(dir / "m", "model.layers.0.mlp.gate.weight")));

  const auto q8 = export_model(dir / "m", dir / "m.q8_0.gguf", "q8_0");
  EXPECT_TRUE(ctune::test::within("q8_0 self-check vs the rounded model: max |dNLL|", q8.check.max_diff, kNllTolerance));
  EXPECT_EQ(io::GgufFile::open(dir / "m.q8_0.gguf")->header().find_tensor("blk.0.ffn_up_exps.weight")->type, io::GgmlType::Q8_0);

  // An adapter that trained the routers (peft.train_router): the merged model exports (the
  // routers' new weights in ffn_gate_inp), a GGUF LoRA adapter cannot carry them and is refused.
  {
    auto lm = model::load_causal_lm(dir / "m", at::kFloat);
    peft::LoraOptions o;
    o.rank = 4;
    o.targets = {"q_proj", "gate_proj"};
    o.modules_to_save = {"gate"};
    peft::apply_lora(lm, o);
    at::NoGradGuard no_grad;
    for (auto& [name, router] : peft::adapter_saved_modules(lm)) router.add_(0.5);
    peft::save_adapter(lm, o, dir / "routers", (dir / "m").string(), /*overwrite=*/true);
  }
  const auto merged = export_model(dir / "m", dir / "merged.gguf", "f32", dir / "routers");
  EXPECT_TRUE(ctune::test::within("merged router adapter self-check: max |dNLL|", merged.check.max_diff, kNllTolerance));
  auto mf = io::GgufFile::open(dir / "merged.gguf");
  EXPECT_TRUE(gguf_tensor(*mf, "blk.0.ffn_gate_inp.weight").equal(hf_tensor(dir / "m", "model.layers.0.mlp.gate.weight") + 0.5));
  GgufExportOptions lora;
  lora.model_dir = dir / "m";
  lora.adapter_dir = dir / "routers";
  lora.out = dir / "routers.gguf";
  EXPECT_THROW(export_gguf_lora(lora), UnsupportedError);
  EXPECT_FALSE(fs::exists(dir / "routers.gguf"));

  expect_export_refusals(dir, moe, {{"norm_topk_prob", false, "norm_topk_prob false"}, {"mlp_only_layers", Json::array({1}), "dense layer 1"}},
                         41);
}

TEST(GgufExportFiles, FailedCheckLeavesNoFile) {
  const fs::path dir = fresh_dir("files-check");
  io::GgufWriter w;
  w.set("general.architecture", io::GgufValue::string("llama"));
  const fs::path out = dir / "x.gguf";
  EXPECT_THROW(write_checked(w, out, false, [](const fs::path&) -> CheckResult {
                 infer::ScoreResult a, b;
                 a.nll = {1.0, 2.0};
                 b.nll = {1.0, 2.5};
                 return compare_scores(a, b, 0.1, "test export");
               }),
               SelfCheckError);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(dir)) << "temporary file left behind";
  try {
    infer::ScoreResult a, b;
    a.nll = {1.0};
    b.nll = {std::nan("")};
    compare_scores(a, b, 0.1, "test export");
    ADD_FAILURE() << "NaN accepted";
  } catch (const SelfCheckError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_STREQ(e.kind(), "self-check failed");
  }
  write_checked(w, out, false, [](const fs::path&) { return CheckResult{}; });
  EXPECT_TRUE(fs::exists(out));
  EXPECT_THROW(write_checked(w, out, false, [](const fs::path&) { return CheckResult{}; }), ConfigError);
}

TEST(GgufExportFiles, ReaderRefusesAModelWithAMissingTensor) {
  const fs::path dir = fresh_dir("files-missing");
  make_model(dir / "m", TinyConfig{}, "byte", 40);
  export_model(dir / "m", dir / "m.gguf", "f32");
  auto full = io::GgufFile::open(dir / "m.gguf");
  io::GgufWriter w;
  for (const auto& [key, value] : full->header().kvs)
    if (key != "general.alignment") w.set(key, value);
  for (const auto& t : full->header().tensors) {
    if (t.name == "blk.1.ffn_up.weight") continue;
    const std::uint8_t* p = full->data(t);
    const std::uint64_t n = t.nbytes;
    w.add_tensor(t.name, t.type, t.ne, [p, n] { return std::vector<std::uint8_t>(p, p + n); });
  }
  w.write(dir / "cut.gguf");
  try {
    load_gguf_model(*io::GgufFile::open(dir / "cut.gguf"));
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor blk.1.ffn_up.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctune::exporter::test
