// Qwen3.5 dense as llama.cpp's qwen35 (docs/formats.md#qwen35-dense-qwen35), and Qwen3.5-MoE as its
// qwen35moe (the same, plus stacked experts and the shared expert): names both ways (the DeltaNet's
// ssm_* tensors, the parameters without a module), the keys and their read-back, the values the
// converter changes (value heads tiled, -exp(A_log), the convolution as [C, K] in F32, norms
// 1 + w but the DeltaNet's own), exports whose self-check rebuilds the model from the file
// (F32 and rounded types), and the refusals.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>


#include "core/error.h"
#include "export/gguf_export.h"
#include "export/gguf_import.h"
#include "export/gguf_metadata.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "export/self_check.h"
#include "export_test_support.h"
#include "io/gguf.h"
#include "model/weights.h"
#include "margins.h"

namespace ctune::exporter::test {
namespace {
namespace fs = std::filesystem;

// HF value heads 0..3 grouped by key head (0, 1 | 2, 3) in llama.cpp's tiled order.
const at::Tensor& tiled_heads() {
  static const at::Tensor order = at::tensor(std::vector<std::int64_t>{0, 2, 1, 3});
  return order;
}

// Rows (dim 0) or columns (dim 1) of `t` in blocks of `width`, blocks in tiled order.
at::Tensor tile(const at::Tensor& t, std::int64_t dim, std::int64_t width) {
  std::vector<at::Tensor> blocks;
  for (std::int64_t h : std::vector<std::int64_t>{0, 2, 1, 3}) blocks.push_back(t.narrow(dim, h * width, width));
  return at::cat(blocks, dim);
}

// The model rebuilt from file `f` has the parameters of the model in `m`, in the same order.
void expect_read_back(const io::GgufFile& f, const fs::path& m) {
  auto rebuilt = load_gguf_model(f);
  auto original = model::load_causal_lm(m, at::kFloat);
  const auto theirs = model::hf_state_dict(rebuilt);
  const auto ours = model::hf_state_dict(original);
  ASSERT_EQ(theirs.size(), ours.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(theirs[i].first, ours[i].first);
    // -exp then log moves A_log by a rounding; everything else comes back bit for bit.
    EXPECT_TRUE(at::allclose(theirs[i].second, ours[i].second, 1e-6, 1e-6)) << ours[i].first;
  }
}

TEST(Qwen35Gguf, NamesMapBothWays) {
  model::ModelConfig c;
  c.model_type = "qwen3_5_text";
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"model.layers.0.linear_attn.in_proj_qkv.weight", "blk.0.attn_qkv.weight"},
      {"model.layers.0.linear_attn.in_proj_z.weight", "blk.0.attn_gate.weight"},
      {"model.layers.0.linear_attn.in_proj_b.weight", "blk.0.ssm_beta.weight"},
      {"model.layers.0.linear_attn.in_proj_a.weight", "blk.0.ssm_alpha.weight"},
      {"model.layers.0.linear_attn.conv1d.weight", "blk.0.ssm_conv1d.weight"},
      {"model.layers.0.linear_attn.dt_bias", "blk.0.ssm_dt.bias"},
      {"model.layers.0.linear_attn.A_log", "blk.0.ssm_a"},
      {"model.layers.0.linear_attn.norm.weight", "blk.0.ssm_norm.weight"},
      {"model.layers.0.linear_attn.out_proj.weight", "blk.0.ssm_out.weight"},
      {"model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
      {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
      {"model.layers.3.post_attention_layernorm.weight", "blk.3.post_attention_norm.weight"},
      {"model.layers.3.input_layernorm.weight", "blk.3.attn_norm.weight"},
      {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
  };
  for (const auto& [hf, gguf] : pairs) {
    EXPECT_EQ(gguf_tensor_name(c, hf).value_or("?"), gguf) << hf;
    EXPECT_EQ(hf_tensor_name(c, gguf).value_or("?"), hf) << gguf;
  }
  EXPECT_EQ(gguf_architecture(c), "qwen35");
  EXPECT_FALSE(gguf_permutes_qk(c));
  EXPECT_TRUE(gguf_shifts_norm(c, "model.layers.3.self_attn.k_norm.weight"));
  EXPECT_TRUE(gguf_shifts_norm(c, "model.norm.weight"));
  EXPECT_FALSE(gguf_shifts_norm(c, "model.layers.0.linear_attn.norm.weight"));
}

// Grouped -> tiled and back, on rows from an offset (in_proj_qkv's value rows) and on columns.
TEST(Qwen35Gguf, TileHeadsReordersTheNamedSliceAndUndoes) {
  using Kind = model::GgufChange::Kind;
  const at::Tensor rows = at::arange(10).view({10, 1}).to(at::kFloat);  // 2 untouched rows, 4 heads of 2
  const std::vector<model::GgufChange> by_rows = {{"p", Kind::tile_heads, 0, 2, 2, 2, 2}};
  const at::Tensor tiled = apply_changes(rows, by_rows);
  EXPECT_TRUE(at::flatten(tiled).to(at::kLong).equal(at::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 6, 7, 4, 5, 8, 9})));
  EXPECT_TRUE(undo_changes(tiled, by_rows).equal(rows));
  const at::Tensor cols = at::randn({3, 8});
  const std::vector<model::GgufChange> by_cols = {{"p", Kind::tile_heads, 1, 0, 2, 2, 2}};
  EXPECT_TRUE(apply_changes(cols, by_cols).equal(tile(cols, 1, 2)));
  EXPECT_TRUE(undo_changes(apply_changes(cols, by_cols), by_cols).equal(cols));
  const at::Tensor conv = at::randn({6, 1, 4});
  const std::vector<model::GgufChange> squeeze = {{"p", Kind::drop_dim1}};
  EXPECT_EQ(apply_changes(conv, squeeze).sizes(), (std::vector<std::int64_t>{6, 4}));
  EXPECT_TRUE(undo_changes(apply_changes(conv, squeeze), squeeze).equal(conv));
}

// The F32 file: keys, tensor shapes and types, the changed values, and the read-back.
TEST(Qwen35Gguf, ExportKeysTensorsAndReadBack) {
  const fs::path dir = fresh_dir("qwen35-f32");
  make_model(dir / "m", tiny_qwen35(), "byte", 50);
  const auto report = export_model(dir / "m", dir / "m.gguf", "f32");
  EXPECT_EQ(report.architecture, "qwen35");
  EXPECT_TRUE(ctune::test::within("f32 self-check: max |dNLL|", report.check.max_diff, kNllTolerance));
  auto f = io::GgufFile::open(dir / "m.gguf");
  const auto& h = f->header();
  const std::vector<std::pair<std::string, std::int64_t>> keys = {
      {"ssm.conv_kernel", 4}, {"ssm.state_size", 16},         {"ssm.group_count", 2},      {"ssm.time_step_rank", 4},
      {"ssm.inner_size", 64}, {"full_attention_interval", 4}, {"rope.dimension_count", 8}, {"attention.key_length", 16}};
  for (const auto& [key, value] : keys) EXPECT_EQ(h.require("qwen35." + key, "t").as_int("t"), value) << key;
  const io::GgufValue& sections = h.require("qwen35.rope.dimension_sections", "t");
  ASSERT_EQ(sections.size(), 4u);
  EXPECT_EQ(sections.type(), io::GgufValueType::INT32);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(sections.int_at(i, "t"), (std::vector<std::int64_t>{2, 1, 1, 0})[i]);

  EXPECT_EQ(h.find_tensor("blk.0.attn_qkv.weight")->ne, (std::vector<std::int64_t>{64, 128}));
  EXPECT_EQ(h.find_tensor("blk.0.ssm_conv1d.weight")->ne, (std::vector<std::int64_t>{4, 128}));
  EXPECT_EQ(h.find_tensor("blk.0.ssm_a")->ne, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(h.find_tensor("blk.3.attn_q.weight")->ne, (std::vector<std::int64_t>{64, 128}));  // query and gate per head
  EXPECT_EQ(h.find_tensor("blk.3.ssm_a"), nullptr);
  EXPECT_EQ(h.find_tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(h.find_tensor("output.weight"), nullptr);

  const fs::path m = dir / "m";
  const std::string l0 = "model.layers.0.linear_attn.";
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_a").equal(-hf_tensor(m, l0 + "A_log").index_select(0, tiled_heads()).exp()));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_dt.bias").equal(hf_tensor(m, l0 + "dt_bias").index_select(0, tiled_heads())));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_beta.weight").equal(hf_tensor(m, l0 + "in_proj_b.weight").index_select(0, tiled_heads())));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.attn_gate.weight").equal(tile(hf_tensor(m, l0 + "in_proj_z.weight"), 0, 16)));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_out.weight").equal(tile(hf_tensor(m, l0 + "out_proj.weight"), 1, 16)));
  const at::Tensor qkv = hf_tensor(m, l0 + "in_proj_qkv.weight");
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.attn_qkv.weight").equal(at::cat({qkv.narrow(0, 0, 64), tile(qkv.narrow(0, 64, 64), 0, 16)})));
  const at::Tensor conv = hf_tensor(m, l0 + "conv1d.weight").squeeze(1);
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_conv1d.weight").equal(at::cat({conv.narrow(0, 0, 64), tile(conv.narrow(0, 64, 64), 0, 16)})));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_norm.weight").equal(hf_tensor(m, l0 + "norm.weight")));
  EXPECT_TRUE(gguf_tensor(*f, "blk.3.attn_q_norm.weight").equal(hf_tensor(m, "model.layers.3.self_attn.q_norm.weight") + 1));
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.post_attention_norm.weight").equal(hf_tensor(m, "model.layers.1.post_attention_layernorm.weight") + 1));
  EXPECT_TRUE(gguf_tensor(*f, "blk.3.attn_q.weight").equal(hf_tensor(m, "model.layers.3.self_attn.q_proj.weight")));

  const model::ModelConfig source = model::load_model_config(m);
  const model::ModelConfig back = config_from_gguf(h, "t");
  EXPECT_EQ(back.model_type, "qwen3_5_text");
  EXPECT_EQ(back.arch.linear.layers, source.arch.linear.layers);
  EXPECT_EQ(back.arch.linear.key_heads, 2);
  EXPECT_EQ(back.arch.linear.value_heads, 4);
  EXPECT_EQ(back.arch.linear.key_dim, 16);
  EXPECT_EQ(back.arch.linear.value_dim, 16);
  EXPECT_EQ(back.arch.linear.conv_kernel, 4);
  EXPECT_DOUBLE_EQ(back.rope.partial_rotary_factor, 0.5);
  EXPECT_TRUE(back.arch.qk_norm && back.arch.norm_offset && back.arch.attn_output_gate && back.tie_word_embeddings);
  expect_read_back(*f, m);
}

// Rounded types (Q8_0's blocks of 32 see out_proj's columns tiled, heads of 16 values) pass the
// self-check against the file; the convolution stays F32. The model is the llama.cpp conformance
// case's (same seed).
TEST(Qwen35Gguf, RoundedTypesPassTheSelfCheck) {
  const fs::path dir = fresh_dir("qwen35-rounded");
  make_model(dir / "m", tiny_qwen35(), "byte", 34);
  for (const char* type : {"f32", "q8_0", "bf16"}) {
    const fs::path out = dir / (std::string("m.") + type + ".gguf");
    const auto report = export_model(dir / "m", out, type);
    EXPECT_TRUE(ctune::test::within(std::string(type) + " self-check", report.check.max_diff, kNllTolerance));
    auto f = io::GgufFile::open(out);
    EXPECT_EQ(f->header().find_tensor("blk.0.ssm_conv1d.weight")->type, io::GgmlType::F32) << type;
    EXPECT_EQ(f->header().find_tensor("blk.0.ssm_out.weight")->type, parse_gguf_type(type, "t")) << type;
  }
}

TEST(Qwen35Gguf, RefusesWhatQwen35CannotExpress) {
  expect_export_refusals(
      fresh_dir("qwen35-refused"), tiny_qwen35(),
      {{"attn_output_gate", false, "attn_output_gate false"},
       {"layer_types", Json::array({"full_attention", "linear_attention", "linear_attention", "full_attention"}), "layer_types"},
       {"linear_value_head_dim", 8, "linear_key_head_dim 16 != linear_value_head_dim 8"},
       {"attention_bias", true, "attention_bias"}},
      53);
}

// The self-check's tolerance past kNllTolerance is kNoiseFactor times the noise the hook
// measures, asked for only then; a wrong file (a difference of 0.5) still fails.
TEST(Qwen35Gguf, SelfCheckToleranceFollowsTheMeasuredNoise) {
  const infer::ScoreResult source{{1.0, 2.0}, {0, 0, 0}};
  int asked = 0;
  auto noise = [&] {
    ++asked;
    return 1e-4;
  };
  auto none = [] { return infer::ScoreResult{}; };
  const CheckResult close = check_export(source, infer::ScoreResult{{1.00005, 2.0}, {0, 0, 0}}, io::GgmlType::F32, none, noise, "t");
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(close.tolerance, kNllTolerance);
  const CheckResult noisy = check_export(source, infer::ScoreResult{{1.0005, 2.0}, {0, 0, 0}}, io::GgmlType::F32, none, noise, "t");
  EXPECT_EQ(asked, 1);
  EXPECT_DOUBLE_EQ(noisy.tolerance, kNoiseFactor * 1e-4);
  EXPECT_DOUBLE_EQ(noisy.noise, 1e-4);
  EXPECT_THROW(check_export(source, infer::ScoreResult{{1.5, 2.0}, {0, 0, 0}}, io::GgmlType::F32, none, noise, "t"), SelfCheckError);
}

// A GGUF LoRA adapter on every Linear of the DeltaNet model (the conformance case's): the
// reference runs it unmerged, the file's model merged, one float32 noise sample apart; the
// noise is measured, and the difference is within kNoiseFactor times it.
TEST(Qwen35Gguf, LoraExportPassesTheSelfCheckWithinTheModelsNoise) {
  const fs::path dir = fresh_dir("qwen35-lora");
  make_model(dir / "m", tiny_qwen35(), "byte", 34);
  make_adapter(dir / "m", dir / "a", {"all-linear"}, 36);
  const auto report = export_adapter(dir / "m", dir / "a", dir / "a.gguf");
  EXPECT_TRUE(ctune::test::within("qwen35 LoRA self-check: max |dNLL|", report.check.max_diff, report.check.tolerance));
  std::cout << "[info] qwen35 LoRA self-check: noise " << report.check.noise << ", tolerance " << report.check.tolerance << std::endl;
  EXPECT_EQ(report.check.tolerance, report.check.noise > 0 ? std::max(kNllTolerance, kNoiseFactor * report.check.noise) : kNllTolerance);
  auto f = io::GgufFile::open(dir / "a.gguf");
  EXPECT_NE(f->header().find_tensor("blk.0.attn_qkv.weight.lora_a"), nullptr);
  EXPECT_NE(f->header().find_tensor("blk.0.ssm_out.weight.lora_b"), nullptr);
}

// --- Qwen3.5-MoE as llama.cpp's qwen35moe ---

TEST(Qwen35MoeGguf, NamesMapBothWays) {
  model::ModelConfig c;
  c.model_type = "qwen3_5_moe_text";
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"model.layers.0.mlp.gate.weight", "blk.0.ffn_gate_inp.weight"},
      {"model.layers.0.mlp.shared_expert.gate_proj.weight", "blk.0.ffn_gate_shexp.weight"},
      {"model.layers.0.mlp.shared_expert.up_proj.weight", "blk.0.ffn_up_shexp.weight"},
      {"model.layers.0.mlp.shared_expert.down_proj.weight", "blk.0.ffn_down_shexp.weight"},
      {"model.layers.0.mlp.shared_expert_gate.weight", "blk.0.ffn_gate_inp_shexp.weight"},
      {"model.layers.0.linear_attn.A_log", "blk.0.ssm_a"},
      {"model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight"},
      {"model.layers.1.post_attention_layernorm.weight", "blk.1.post_attention_norm.weight"},
  };
  for (const auto& [hf, gguf] : pairs) {
    EXPECT_EQ(gguf_tensor_name(c, hf).value_or("?"), gguf) << hf;
    EXPECT_EQ(hf_tensor_name(c, gguf).value_or("?"), hf) << gguf;
  }
  EXPECT_FALSE(gguf_tensor_name(c, "model.layers.0.mlp.gate_proj.weight"));  // no dense MLP
  const auto slot = gguf_expert_slot(c, "model.layers.2.mlp.experts.5.down_proj.weight");
  ASSERT_TRUE(slot);
  EXPECT_EQ(slot->gguf, "blk.2.ffn_down_exps.weight");
  EXPECT_EQ(slot->expert, 5);
  EXPECT_FALSE(gguf_expert_slot(c, "model.layers.2.mlp.shared_expert.down_proj.weight"));
  EXPECT_EQ(gguf_architecture(c), "qwen35moe");
  EXPECT_TRUE(gguf_shifts_norm(c, "model.layers.1.self_attn.k_norm.weight"));
  EXPECT_FALSE(gguf_shifts_norm(c, "model.layers.0.linear_attn.norm.weight"));
}

// The F32 file: the expert keys, the stacked experts, the shared expert and its gate, the
// DeltaNet's tensors as qwen35 writes them, and the read-back.
TEST(Qwen35MoeGguf, ExportKeysTensorsAndReadBack) {
  const fs::path dir = fresh_dir("qwen35moe-f32");
  make_model(dir / "m", tiny_qwen35_moe(), "byte", 60);
  const auto report = export_model(dir / "m", dir / "m.gguf", "f32");
  EXPECT_EQ(report.architecture, "qwen35moe");
  EXPECT_TRUE(ctune::test::within("f32 self-check: max |dNLL|", report.check.max_diff, kNllTolerance));
  auto f = io::GgufFile::open(dir / "m.gguf");
  const auto& h = f->header();
  const std::vector<std::pair<std::string, std::int64_t>> keys = {
      {"expert_count", 8},        {"expert_used_count", 2},     {"expert_feed_forward_length", 32},
      {"expert_shared_feed_forward_length", 48}, {"full_attention_interval", 2}, {"ssm.time_step_rank", 4},
      {"ssm.group_count", 2},     {"rope.dimension_count", 8}};
  for (const auto& [key, value] : keys) EXPECT_EQ(h.require("qwen35moe." + key, "t").as_int("t"), value) << key;
  ASSERT_EQ(h.require("qwen35moe.rope.dimension_sections", "t").size(), 4u);

  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {
      {"blk.0.ffn_gate_inp.weight", {64, 8}},      {"blk.0.ffn_gate_exps.weight", {64, 32, 8}},
      {"blk.0.ffn_up_exps.weight", {64, 32, 8}},   {"blk.0.ffn_down_exps.weight", {32, 64, 8}},
      {"blk.3.ffn_gate_shexp.weight", {64, 48}},   {"blk.3.ffn_down_shexp.weight", {48, 64}},
      {"blk.3.ffn_gate_inp_shexp.weight", {64, 1}}, {"blk.0.ssm_conv1d.weight", {4, 128}},
      {"blk.1.attn_q.weight", {64, 128}},          {"output.weight", {64, 272}}};
  for (const auto& [name, ne] : shapes) {
    const io::GgufTensorInfo* t = h.find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->ne, ne) << name;
  }
  EXPECT_EQ(h.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(h.find_tensor("blk.1.ssm_a"), nullptr);
  EXPECT_EQ(h.find_tensor("blk.0.attn_q.weight"), nullptr);

  const fs::path m = dir / "m";
  std::vector<at::Tensor> ups;
  for (int e = 0; e < 8; ++e) ups.push_back(hf_tensor(m, "model.layers.2.mlp.experts." + std::to_string(e) + ".up_proj.weight"));
  EXPECT_TRUE(gguf_tensor(*f, "blk.2.ffn_up_exps.weight").equal(at::stack(ups)));
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.ffn_gate_inp_shexp.weight").equal(hf_tensor(m, "model.layers.1.mlp.shared_expert_gate.weight")));
  EXPECT_TRUE(gguf_tensor(*f, "blk.1.ffn_up_shexp.weight").equal(hf_tensor(m, "model.layers.1.mlp.shared_expert.up_proj.weight")));
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ffn_gate_inp.weight").equal(hf_tensor(m, "model.layers.0.mlp.gate.weight")));
  const std::string l0 = "model.layers.0.linear_attn.";
  EXPECT_TRUE(gguf_tensor(*f, "blk.0.ssm_out.weight").equal(tile(hf_tensor(m, l0 + "out_proj.weight"), 1, 16)));

  const model::ModelConfig back = config_from_gguf(h, "t");
  EXPECT_EQ(back.model_type, "qwen3_5_moe_text");
  EXPECT_EQ(back.arch.moe.experts, 8);
  EXPECT_EQ(back.arch.moe.top_k, 2);
  EXPECT_EQ(back.arch.moe.intermediate, 32);
  EXPECT_EQ(back.arch.moe.shared_intermediate, 48);
  EXPECT_TRUE(back.arch.moe.normalize_top_k);
  EXPECT_EQ(back.arch.linear.layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_FALSE(back.tie_word_embeddings);
  expect_read_back(*f, m);
}

TEST(Qwen35MoeGguf, RefusesWhatQwen35MoeCannotExpress) {
  expect_export_refusals(
      fresh_dir("qwen35moe-refused"), tiny_qwen35_moe(),
      {{"attention_bias", true, "attention_bias has no qwen35moe GGUF form"},
       {"hidden_act", "gelu_pytorch_tanh", "hidden_act other than silu has no qwen35moe GGUF form"},
       {"layer_types", Json::array({"linear_attention", "full_attention", "full_attention", "linear_attention"}), "layer_types"},
       {"linear_value_head_dim", 8, "linear_key_head_dim 16 != linear_value_head_dim 8"}},
      63);
}

}  // namespace
}  // namespace ctune::exporter::test
