// Format readers refuse malformed input with one clear typed error and never crash: every
// malformed case, a corruption fuzz over a valid file, and writer/reader agreement. Torch-free,
// so it also runs in the AddressSanitizer build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "malformed.h"
#include "model/config.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::testing::Expect;

namespace {

const fs::path kRoot = fs::path(CTUNE_TEST_DATA_DIR) / "malformed-inprocess";

// What the CLI does before allocating a model: config, then every checkpoint file.
void open_model_dir(const fs::path& dir) {
  model::load_model_config(dir);
  io::CheckpointReader reader(dir);
}

bool kind_matches(const Error& e, Expect kind) {
  switch (kind) {
    case Expect::Format: return dynamic_cast<const FormatError*>(&e) != nullptr;
    case Expect::Io: return dynamic_cast<const IoError*>(&e) != nullptr;
    case Expect::Config: return dynamic_cast<const ConfigError*>(&e) != nullptr;
    case Expect::Unsupported: return dynamic_cast<const UnsupportedError*>(&e) != nullptr;
  }
  return false;
}

TEST(Malformed, EveryCaseIsRefusedWithOneClearLine) {
  auto cases = ctune::testing::write_malformed_cases(kRoot);
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      open_model_dir(c.dir);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::printf("%-34s %s: %s\n", c.name.c_str(), e.kind(), msg.c_str());
      EXPECT_TRUE(kind_matches(e, c.kind)) << c.name << ": wrong error kind " << e.kind() << ": " << msg;
      EXPECT_NE(msg.find(c.message_part), std::string::npos) << c.name << ": " << msg;
      EXPECT_NE(msg.find(c.file_part), std::string::npos) << c.name << ": message does not name the file: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name << ": " << msg;
    }
  }
}

// Random truncations and byte flips of a valid file: either a valid parse or a FormatError.
TEST(Malformed, CorruptionFuzzNeverCrashes) {
  const std::string good = ctune::testing::valid_safetensors_bytes();
  std::mt19937 rng(1234);
  int refused = 0, accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    if (i % 3 == 0) {
      bytes.resize(rng() % (good.size() + 1));
    } else {
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    }
    try {
      auto h = io::parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(),
                                            bytes.size(), "fuzz");
      for (const auto& t : h.tensors) ASSERT_LE(h.data_start() + t.end, bytes.size());
      ++accepted;
    } catch (const FormatError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
  std::printf("fuzz: %d refused, %d accepted (payload-only flips)\n", refused, accepted);
}

TEST(Safetensors, WriterFollowsReferenceLayout) {
  const fs::path path = fs::path(CTUNE_TEST_DATA_DIR) / "writer_layout.safetensors";
  std::vector<float> f32(3, 1.5f);
  std::vector<std::uint16_t> bf16(5, 0x3f80);
  std::vector<std::int64_t> i64(2, 7);
  io::write_safetensors(path, {{"z_bf16", io::DType::BF16, {5}, bf16.data(), 10},
                               {"a_f32", io::DType::F32, {3}, f32.data(), 12},
                               {"m_i64", io::DType::I64, {1, 2}, i64.data(), 16}});
  auto file = io::SafetensorsFile::open(path);
  const auto& h = file->header();
  EXPECT_EQ(h.header_size % 8, 0u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  ASSERT_EQ(h.tensors.size(), 3u);
  // Largest alignment first, then by name.
  EXPECT_EQ(h.tensors[0].name, "m_i64");
  EXPECT_EQ(h.tensors[1].name, "a_f32");
  EXPECT_EQ(h.tensors[2].name, "z_bf16");
  for (const auto& t : h.tensors) EXPECT_EQ((h.data_start() + t.begin) % io::dtype_size(t.dtype), 0u) << t.name;
  EXPECT_EQ(std::memcmp(file->data(h.tensors[1]), f32.data(), 12), 0);
  EXPECT_THROW(io::write_safetensors(path, {{"x", io::DType::F32, {3}, f32.data(), 8}}), FormatError);
  // A failed write leaves the previous file intact and no temporary behind.
  EXPECT_EQ(io::SafetensorsFile::open(path)->header().tensors.size(), 3u);
  for (const auto& e : fs::directory_iterator(path.parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Safetensors, EmptyAndScalarTensorsAreValid) {
  std::string h = R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  bytes += h + std::string(8, '\0');
  auto parsed = io::parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(),
                                             bytes.size(), "t");
  EXPECT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(parsed.find("s")->numel(), 1u);
  EXPECT_EQ(parsed.find("e")->numel(), 0u);
}

TEST(Checkpoint, ShardPlanAndNames) {
  std::size_t n = 0;
  auto plan = io::plan_shards({40, 40, 40, 200, 10}, 100, &n);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(plan, (std::vector<std::size_t>{0, 0, 1, 2, 3}));  // 200 > limit gets its own shard
  EXPECT_EQ(io::shard_file_name(1, 4), "model-00002-of-00004.safetensors");
  EXPECT_EQ(io::shard_file_name(0, 1), "model.safetensors");
  EXPECT_EQ(io::parse_byte_size("5GB", "x"), 5'000'000'000ull);
  EXPECT_EQ(io::parse_byte_size("2GiB", "x"), 2ull << 30);
  EXPECT_EQ(io::parse_byte_size("300", "x"), 300ull);
  EXPECT_THROW(io::parse_byte_size("5XB", "x"), ConfigError);
  EXPECT_THROW(io::parse_byte_size("0", "x"), ConfigError);
  EXPECT_THROW(io::parse_byte_size("", "x"), ConfigError);
}

TEST(Config, EachFamilyReadsItsOwnKeys) {
  // Qwen3: q/k norms always, head_dim 128 when absent (Qwen3Config's default, not hidden/heads),
  // 32768 positions by default, attention_bias on all four projections, windows only past
  // max_window_layers.
  auto q3 = model::parse_model_config(
      Json::parse(R"({"model_type":"qwen3","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":2,"num_attention_heads":2,"attention_bias":true,"use_sliding_window":true,
        "sliding_window":4,"max_window_layers":2})"),
      "q3");
  EXPECT_TRUE(q3.arch.qk_norm);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.max_position_embeddings, 32768);
  EXPECT_TRUE(q3.arch.qkv_bias && q3.arch.o_bias);
  EXPECT_FALSE(q3.arch.sliding_window().has_value()) << "no layer is at or past max_window_layers";
  auto q3w = model::parse_model_config(
      Json::parse(R"({"model_type":"qwen3","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":2,"num_attention_heads":2,"head_dim":4,"sliding_window":4,"use_sliding_window":true,
        "layer_types":["full_attention","sliding_attention"]})"),
      "q3w");
  EXPECT_EQ(q3w.head_dim, 4);
  EXPECT_EQ(q3w.arch.layer_windows, (std::vector<std::int64_t>{0, 4}));
  // SmolLM3: NoPE every 4th layer by default, tied, rope_theta 2e6.
  auto s3 = model::parse_model_config(
      Json::parse(R"({"model_type":"smollm3","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":8,"num_attention_heads":2})"),
      "s3");
  EXPECT_EQ(s3.arch.rope_layers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_TRUE(s3.tie_word_embeddings);
  EXPECT_EQ(s3.rope.theta, 2000000.0);
  // Mistral and Llama read the same keys; neither has q/k norms.
  auto m = model::parse_model_config(
      Json::parse(R"({"model_type":"mistral","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":1,"num_attention_heads":2,"sliding_window":4096})"),
      "m");
  EXPECT_FALSE(m.arch.qk_norm);
  EXPECT_EQ(m.arch.layer_windows, (std::vector<std::int64_t>{4096}));
  // Llama never had a window: transformers does not read the key, nor does ctune.
  auto l = model::parse_model_config(
      Json::parse(R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":1,"num_attention_heads":2,"sliding_window":4})"),
      "l");
  EXPECT_FALSE(l.arch.sliding_window().has_value());
  EXPECT_EQ(l.arch.activation, model::Activation::silu);
  EXPECT_FALSE(l.arch.norm_offset || l.arch.sandwich_norms || l.arch.embed_scale);
  EXPECT_DOUBLE_EQ(l.attention_scale(), 1.0 / std::sqrt(4.0));
  // Gemma 2: Gemma2Config's defaults (caps 50 and 30, window 4096 on even layers, head_dim 256,
  // query_pre_attn_scalar 256, tied, GeGLU) when the keys are absent; null caps are no caps.
  auto g2 = model::parse_model_config(
      Json::parse(R"({"model_type":"gemma2","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":3,"num_attention_heads":2,"hidden_act":"silu"})"),
      "g2");
  EXPECT_EQ(g2.head_dim, 256);
  EXPECT_TRUE(g2.tie_word_embeddings);
  EXPECT_EQ(g2.arch.activation, model::Activation::gelu_tanh) << "Gemma reads hidden_activation, not hidden_act";
  EXPECT_TRUE(g2.arch.norm_offset && g2.arch.sandwich_norms && g2.arch.embed_scale);
  EXPECT_EQ(g2.arch.attn_softcap, 50.0);
  EXPECT_EQ(g2.arch.final_softcap, 30.0);
  EXPECT_EQ(g2.arch.layer_windows, (std::vector<std::int64_t>{4096, 0, 4096}));
  EXPECT_DOUBLE_EQ(g2.attention_scale(), 1.0 / 16.0);
  auto g2n = model::parse_model_config(
      Json::parse(R"({"model_type":"gemma2","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":2,"num_attention_heads":2,"attn_logit_softcapping":null,"final_logit_softcapping":null,
        "sliding_window":null,"query_pre_attn_scalar":144})"),
      "g2n");
  EXPECT_EQ(g2n.arch.attn_softcap, 0.0);
  EXPECT_EQ(g2n.arch.final_softcap, 0.0);
  EXPECT_TRUE(g2n.arch.layer_windows.empty());
  EXPECT_DOUBLE_EQ(g2n.attention_scale(), 1.0 / 12.0);
  // Gemma 3: every 6th layer global by default; local RoPE from rope_local_base_freq; global
  // rope_theta 1e6 by default with its rope_scaling; no caps by default; q/k norms.
  auto g3 = model::parse_model_config(
      Json::parse(R"({"model_type":"gemma3_text","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":7,"num_attention_heads":2,"sliding_window":512,
        "rope_scaling":{"rope_type":"linear","factor":8.0}})"),
      "g3");
  EXPECT_TRUE(g3.arch.qk_norm);
  EXPECT_EQ(g3.arch.attn_softcap, 0.0);
  EXPECT_EQ(g3.arch.final_softcap, 0.0);
  EXPECT_EQ(g3.arch.layer_windows, (std::vector<std::int64_t>{512, 512, 512, 512, 512, 0, 512}));
  EXPECT_EQ(g3.rope.theta, 1000000.0);
  EXPECT_EQ(g3.rope.type, "linear");
  ASSERT_TRUE(g3.arch.local_rope.has_value());
  EXPECT_EQ(g3.arch.local_rope->theta, 10000.0);
  EXPECT_EQ(g3.arch.local_rope->type, "default");
  EXPECT_EQ(g3.arch.local_rope_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  // Transformers v5 writes one rope section per layer type.
  auto g3v5 = model::parse_model_config(
      Json::parse(R"({"model_type":"gemma3_text","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":2,"num_attention_heads":2,"layer_types":["sliding_attention","full_attention"],
        "rope_parameters":{"full_attention":{"rope_type":"linear","factor":8.0,"rope_theta":1000000.0},
                           "sliding_attention":{"rope_type":"default","rope_theta":10000.0}}})"),
      "g3v5");
  EXPECT_EQ(g3v5.rope.type, "linear");
  EXPECT_EQ(g3v5.rope.factor, 8.0);
  EXPECT_EQ(g3v5.arch.local_rope->theta, 10000.0);
  EXPECT_EQ(g3v5.arch.layer_windows, (std::vector<std::int64_t>{4096, 0}));
  try {
    model::parse_model_config(Json::parse(R"({"model_type":"gemma7"})"), "g");
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("(supported: llama, mistral, qwen2, qwen3, smollm3, gemma2, gemma3_text, gemma3, phi3, mixtral, qwen3_moe, qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen3_next, gpt_oss)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Config, ReadsBothSpellingsOfDtypeAndRope) {
  auto v4 = model::parse_model_config(
      Json::parse(R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":1,"num_attention_heads":2,"torch_dtype":"bfloat16","rope_theta":500000.0,
        "rope_scaling":{"type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
        "original_max_position_embeddings":8192}})"),
      "v4");
  EXPECT_EQ(v4.dtype, "bfloat16");
  EXPECT_EQ(v4.rope.type, "llama3");
  EXPECT_EQ(v4.rope.theta, 500000.0);
  EXPECT_EQ(v4.num_key_value_heads, 2);
  EXPECT_EQ(v4.head_dim, 4);
  auto v5 = model::parse_model_config(
      Json::parse(R"({"model_type":"qwen2","vocab_size":16,"hidden_size":8,"intermediate_size":16,
        "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"dtype":"float16",
        "rope_parameters":{"rope_type":"default","rope_theta":1000000.0},"sliding_window":4,
        "use_sliding_window":false})"),
      "v5");
  EXPECT_EQ(v5.dtype, "float16");
  EXPECT_EQ(v5.rope.theta, 1000000.0);
  EXPECT_TRUE(v5.arch.qkv_bias);
  EXPECT_FALSE(v5.arch.o_bias);
  EXPECT_FALSE(v5.arch.sliding_window().has_value()) << "Qwen2 ignores sliding_window unless use_sliding_window";
}

}  // namespace
