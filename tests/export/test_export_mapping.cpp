// HF -> GGUF mapping pieces in isolation: tensor names both ways, the Q/K row permutation (by
// index, and by what it is for: HF's rotate-half RoPE on the original rows equals llama.cpp's
// adjacent-pair RoPE on the permuted rows), llama3 rope factors against the formula, and the
// pre-tokenizer names llama.cpp accepts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "export/gguf_metadata.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "export/pre_tokenizer_names.h"
#include "model/config.h"
#include "model/rope.h"
#include "ops/fused_rope.h"
#include "margins.h"

namespace ctune::exporter {
namespace {

model::ModelConfig config_of(const std::string& model_type) {
  model::ModelConfig c;
  c.model_type = model_type;
  return c;
}

TEST(GgufNames, HfAndGgufNamesMapBothWays) {
  const auto llama = config_of("llama");
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.11.self_attn.q_proj.weight", "blk.11.attn_q.weight"},
      {"model.layers.11.self_attn.q_proj.bias", "blk.11.attn_q.bias"},
      {"model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight"},
      {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight"},
      {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
      {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight"},
      {"model.layers.3.mlp.down_proj.bias", "blk.3.ffn_down.bias"},
  };
  for (const auto& [hf, gguf] : pairs) {
    EXPECT_EQ(gguf_tensor_name(llama, hf).value_or("?"), gguf) << hf;
    EXPECT_EQ(hf_tensor_name(llama, gguf).value_or("?"), hf) << gguf;
  }
  // Qwen3's per-head norms: llama.cpp's LLM_TENSOR_ATTN_Q_NORM / K_NORM; not in Llama's table.
  const auto qwen3 = config_of("qwen3");
  EXPECT_EQ(gguf_tensor_name(qwen3, "model.layers.2.self_attn.q_norm.weight").value_or("?"), "blk.2.attn_q_norm.weight");
  EXPECT_EQ(hf_tensor_name(qwen3, "blk.2.attn_k_norm.weight").value_or("?"), "model.layers.2.self_attn.k_norm.weight");
  EXPECT_EQ(gguf_tensor_name(qwen3, "model.layers.2.self_attn.q_proj.weight").value_or("?"), "blk.2.attn_q.weight");
  EXPECT_FALSE(gguf_tensor_name(llama, "model.layers.2.self_attn.q_norm.weight").has_value());
  for (const char* bad : {"model.layers.x.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.lora_A.weight",
                          "model.layers.0.self_attn.rotary_emb.inv_freq", "rope_freqs.weight", "blk.0.attn_q"}) {
    EXPECT_FALSE(gguf_tensor_name(llama, bad).has_value()) << bad;
    EXPECT_FALSE(hf_tensor_name(llama, bad).has_value()) << bad;
  }
  // Experts: parts of one stacked tensor per projection; the router an ordinary layer tensor.
  const auto mixtral = config_of("mixtral");
  const auto slot = gguf_expert_slot(mixtral, "model.layers.7.block_sparse_moe.experts.5.w3.weight");
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->gguf, "blk.7.ffn_up_exps.weight");
  EXPECT_EQ(slot->expert, 5);
  EXPECT_EQ(gguf_expert_slot(mixtral, "model.layers.7.block_sparse_moe.experts.0.w2.weight")->gguf, "blk.7.ffn_down_exps.weight");
  EXPECT_EQ(gguf_tensor_name(mixtral, "model.layers.7.block_sparse_moe.gate.weight").value_or("?"), "blk.7.ffn_gate_inp.weight");
  const auto qwen3_moe = config_of("qwen3_moe");
  EXPECT_EQ(gguf_expert_slot(qwen3_moe, "model.layers.2.mlp.experts.11.gate_proj.weight")->gguf, "blk.2.ffn_gate_exps.weight");
  EXPECT_EQ(hf_tensor_name(qwen3_moe, "blk.2.ffn_gate_inp.weight").value_or("?"), "model.layers.2.mlp.gate.weight");
  EXPECT_FALSE(gguf_expert_slot(qwen3_moe, "model.layers.2.mlp.gate_proj.weight").has_value());
  EXPECT_FALSE(gguf_expert_slot(qwen3_moe, "model.layers.2.mlp.experts.x.gate_proj.weight").has_value());
  EXPECT_FALSE(gguf_expert_slot(llama, "model.layers.2.mlp.experts.1.gate_proj.weight").has_value());
  EXPECT_EQ(qk_projection("model.layers.0.self_attn.q_proj.bias"), 'q');
  EXPECT_EQ(qk_projection("model.layers.0.self_attn.k_proj.weight"), 'k');
  EXPECT_EQ(qk_projection("model.layers.0.self_attn.v_proj.weight"), 0);
}

TEST(GgufNames, ArchitectureFromModelType) {
  model::ModelConfig c;
  c.model_type = "mistral";
  EXPECT_EQ(gguf_architecture(c), "llama");
  c.model_type = "qwen2";
  EXPECT_EQ(gguf_architecture(c), "qwen2");
  c.model_type = "qwen3";
  EXPECT_EQ(gguf_architecture(c), "qwen3");
  EXPECT_FALSE(gguf_permutes_qk(c));
  c.model_type = "mistral";
  EXPECT_TRUE(gguf_permutes_qk(c));
  c.model_type = "gpt2";
  EXPECT_THROW(gguf_architecture(c), UnsupportedError);
}

TEST(QkPermutation, RowIndicesAndInverse) {
  const std::int64_t heads = 3, d = 8, in = 5;
  auto w = at::arange(heads * d * in, at::kFloat).view({heads * d, in});
  auto p = permute_qk_rows(w, heads);
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
      EXPECT_TRUE(p[h * d + 2 * i].equal(w[h * d + i])) << "head " << h << " pair " << i;
      EXPECT_TRUE(p[h * d + 2 * i + 1].equal(w[h * d + i + d / 2])) << "head " << h << " pair " << i;
    }
  }
  EXPECT_TRUE(unpermute_qk_rows(p, heads).equal(w));
  auto bias = at::arange(heads * d, at::kFloat);
  EXPECT_TRUE(unpermute_qk_rows(permute_qk_rows(bias, heads), heads).equal(bias));
}

// llama.cpp's NORM RoPE: pairs (2i, 2i+1) rotate by pos * inv_freq[i]. x: [heads * d].
at::Tensor norm_rope(const at::Tensor& x, std::int64_t heads, const at::Tensor& inv_freq, double pos) {
  auto out = x.clone();
  const auto d = x.size(0) / heads;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double theta = pos * inv_freq[i].item<double>();
      const double x0 = x[h * d + 2 * i].item<double>(), x1 = x[h * d + 2 * i + 1].item<double>();
      out[h * d + 2 * i] = x0 * std::cos(theta) - x1 * std::sin(theta);
      out[h * d + 2 * i + 1] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  }
  return out;
}

TEST(QkPermutation, TurnsRotateHalfRopeIntoAdjacentPairRope) {
  model::ModelConfig c;
  c.head_dim = 16;
  c.rope.theta = 10000.0;
  const std::int64_t heads = 2, hidden = 24, d = c.head_dim;
  at::manual_seed(3);
  auto w = at::randn({heads * d, hidden}, at::kDouble);
  auto x = at::randn({hidden}, at::kDouble);
  auto inv_freq = model::rope_inv_freq(c).to(at::kDouble);
  for (double pos : {0.0, 1.0, 7.0, 123.0}) {
    // HF: rotate-half on the original rows (ops::apply_rope, [B, heads, T, d]).
    auto q = at::matmul(w, x).view({1, heads, 1, d});
    auto positions = at::full({1, 1}, static_cast<std::int64_t>(pos), at::kLong);
    auto [cos, sin] = model::rope_cos_sin(inv_freq.to(at::kFloat), positions, at::kDouble);
    auto hf = ops::apply_rope(q, cos, sin).reshape({heads * d});
    // llama.cpp: adjacent pairs on the permuted rows.
    auto gg = norm_rope(at::matmul(permute_qk_rows(w, heads), x), heads, inv_freq, pos);
    // HF's side forms the angles pos * inv_freq in fp32 (as HF does), this side in double: an
    // angle differs by at most u32 pos inv_freq <= u32 pos, which moves a rotated value by at
    // most |q| times that. Tolerance: 4 times that bound (plus double rounding at pos 0).
    const double bound = 4 * ctune::test::kUnitRoundoffFp32 * pos * q.abs().max().item<double>() + 1e-12;
    EXPECT_TRUE(ctune::test::within("position " + std::to_string(static_cast<int>(pos)) + ": max |HF rope - llama.cpp rope|",
                                    (permute_qk_rows(hf, heads) - gg).abs().max().item<double>(), bound));
  }
}

TEST(RopeFactors, Llama3FactorsFollowTheFormula) {
  model::ModelConfig c;
  c.head_dim = 64;
  c.rope.theta = 500000.0;
  c.rope.type = "llama3";
  c.rope.factor = 32.0;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position = 8192;
  const auto factors = llama3_rope_factors(c);
  ASSERT_EQ(factors.size(0), 32);
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  int blended = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < 32; ++i) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 64.0);
    const double wavelen = 2 * M_PI / inv;
    double expected;
    if (wavelen < high_wavelen) {
      expected = 1.0;
    } else if (wavelen > low_wavelen) {
      expected = 32.0;
    } else {
      const double s = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      expected = 1.0 / ((1 - s) / 32.0 + s);
      ++blended;
    }
    worst = std::max(worst, std::abs(factors[i].item<double>() - expected) / expected);
  }
  // rope_freqs is an F32 tensor: each factor is within a few fp32 roundings (~1e-7 relative) of
  // the formula in double; a wrong band or blend is off by 10% or more.
  EXPECT_TRUE(ctune::test::within("worst factor: relative error", worst, 1e-5));
  EXPECT_GT(blended, 0);
}

Json pre(const std::string& regex, bool byte_level_regex = false) {
  return Json{{"type", "Sequence"},
              {"pretokenizers",
               {Json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", byte_level_regex}}}}};
}

TEST(PreTokenizerNames, KnownPatternsMapToLlamaCppNames) {
  EXPECT_EQ(llama_cpp_pre_tokenizer(pre(kLlama3Pattern), "t"), "llama-bpe");
  EXPECT_EQ(llama_cpp_pre_tokenizer(pre(kQwen2Pattern), "t"), "qwen2");
  EXPECT_EQ(llama_cpp_pre_tokenizer(Json{{"type", "ByteLevel"}, {"use_regex", true}}, "t"), "gpt-2");
  EXPECT_EQ(llama_cpp_pre_tokenizer(Json{{"type", "ByteLevel"}}, "t"), "gpt-2");  // use_regex defaults to true
}

TEST(PreTokenizerNames, UnknownShapesAreRefusedWithThePattern) {
  auto refused = [](const Json& j, const std::string& expect) {
    try {
      llama_cpp_pre_tokenizer(j, "tokenizer.json: pre_tokenizer");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("llama.cpp has no pre-tokenizer"), std::string::npos) << e.what();
    }
  };
  refused(pre("\\p{N}+| ?\\p{L}+"), "\\\\p{N}+");
  refused(pre(kLlama3Pattern, /*byte_level_regex=*/true), "use_regex=true");
  refused(Json{{"type", "ByteLevel"}, {"use_regex", false}}, "ByteLevel(use_regex=false)");
  Json with_digits = pre(kLlama3Pattern);
  with_digits["pretokenizers"].push_back(Json{{"type", "Digits"}, {"individual_digits", true}});
  refused(with_digits, "Digits");
  refused(Json(), "none");
  refused(Json{{"type", "Metaspace"}}, "Metaspace");
  Json inverted = pre(kQwen2Pattern);
  inverted["pretokenizers"][0]["invert"] = true;
  refused(inverted, "Split");
}

}  // namespace
}  // namespace ctune::exporter
