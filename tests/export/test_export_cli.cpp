// `ctune export` through the real binary: a successful export prints its self-check line and
// leaves exactly the output file; every refusal is one line on stderr with exit status 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include "core/json.h"
#include "export_test_support.h"
#include "io/file.h"
#include "run_ctune.h"

namespace ctune::exporter::test {
namespace {
namespace fs = std::filesystem;
using ctune::testing::ctune;
using ctune::testing::expect_one_line_failure;

// One tiny model and adapter shared by the cases of this file, in a directory of this process:
// CTest runs each case as its own process, two at a time, and a shared directory would be
// recreated under a running case.
const fs::path& base() {
  static const fs::path dir = [] {
    const fs::path d = fresh_dir("cli-" + std::to_string(::getpid()));
    make_model(d / "model", TinyConfig{}, "byte", 50);
    make_adapter(d / "model", d / "adapter", {"q_proj", "v_proj"}, 51);
    return d;
  }();
  return dir;
}

// Removes this process's directory when its cases are done.
class RemoveBase : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(data_dir() / ("cli-" + std::to_string(::getpid())), ec);
  }
};
const auto* const kRemoveBase = ::testing::AddGlobalTestEnvironment(new RemoveBase);

TEST(ExportCli, SuccessPrintsTheSelfCheck) {
  const fs::path out = base() / "ok.gguf";
  fs::remove(out);
  const auto r = ctune({"export", "--model", (base() / "model").string(), "--adapter", (base() / "adapter").string(),
                        "--format", "gguf", "--out", out.string(), "--type", "f16"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("self-check: max |dNLL|"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rounding to f16: max |dNLL|"), std::string::npos) << r.out;  // reported, not checked
  EXPECT_TRUE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(base()))
    EXPECT_EQ(e.path().filename().string().find(".unchecked-"), std::string::npos) << e.path();
}

TEST(ExportCli, ErrorsAreOneLine) {
  const std::string model = (base() / "model").string(), adapter = (base() / "adapter").string();
  const std::string out = (base() / "err.gguf").string();
  fs::remove(out);
  expect_one_line_failure(ctune({"export", "--model", (base() / "nope").string(), "--out", out}),
                          "model directory not found", "missing model");
  expect_one_line_failure(ctune({"export", "--model", model, "--adapter", (base() / "nope").string(), "--out", out}),
                          "adapter directory not found", "missing adapter");
  expect_one_line_failure(ctune({"export", "--model", model, "--out", out, "--type", "q4_0"}),
                          "--type: expected f32, f16, bf16 or q8_0", "unknown type");
  expect_one_line_failure(ctune({"export", "--model", model, "--out", out, "--format", "onnx"}),
                          "--format: expected gguf or gguf-lora", "unknown format");
  expect_one_line_failure(ctune({"export", "--model", model, "--out", out, "--format", "gguf-lora"}),
                          "--adapter DIR is required", "lora without adapter");
  expect_one_line_failure(ctune({"export", "--model", model, "--adapter", adapter, "--format", "gguf-lora", "--out", out,
                                 "--type", "q8_0"}),
                          "too short for Q8_0", "q8_0 lora");
  io::write_file_atomic(out, "x");
  expect_one_line_failure(ctune({"export", "--model", model, "--out", out}), "pass --overwrite", "existing output");
  fs::remove(out);
  EXPECT_EQ(ctune({"export", "--model", model}).status, 2);  // --out missing: a usage error
}

// A copy of the model whose tokenizer.json is changed by `edit` (or removed when null).
fs::path model_variant(const std::string& name, const std::function<void(Json&)>& edit) {
  const fs::path dir = base() / name;
  fs::remove_all(dir);
  fs::copy(base() / "model", dir, fs::copy_options::recursive);
  if (!edit) {
    fs::remove(dir / "tokenizer.json");
    return dir;
  }
  Json tokenizer = Json::parse(io::read_text_file(dir / "tokenizer.json"));
  edit(tokenizer);
  io::write_file_atomic(dir / "tokenizer.json", tokenizer.dump());
  return dir;
}

TEST(ExportCli, TokenizersLlamaCppCannotReproduceAreRefused) {
  const std::string out = (base() / "tok.gguf").string();
  const fs::path digits = model_variant("digits", [](Json& t) {
    t["pre_tokenizer"] = Json{{"type", "Sequence"},
                              {"pretokenizers",
                               {Json{{"type", "Digits"}, {"individual_digits", true}},
                                Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  });
  expect_one_line_failure(ctune({"export", "--model", digits.string(), "--out", out}), "llama.cpp has no pre-tokenizer",
                          "unknown pre-tokenizer");
  expect_one_line_failure(ctune({"export", "--model", model_variant("notok", nullptr).string(), "--out", out}),
                          "no tokenizer.json or tokenizer.model", "no tokenizer");
  EXPECT_FALSE(fs::exists(out));
}

// What a family's llama.cpp architecture cannot express is refused before any weight is read,
// naming the key: SmolLM3 with NoPE layers off llama.cpp's fixed step of 4, Phi-3 whose query
// rows are not hidden_size wide, a Gemma 2 with an untied head.
TEST(ExportCli, ConfigsTheGgufArchitectureCannotExpressAreRefused) {
  const fs::path dir = fresh_dir("cli-arch-" + std::to_string(::getpid()));
  const std::string out = (dir / "arch.gguf").string();
  TinyConfig smollm3;
  smollm3.model_type = "smollm3";
  smollm3.layers = 3;
  smollm3.tie = true;
  smollm3.extra = {{"no_rope_layer_interval", 3}};
  make_model(dir / "smollm3", smollm3, "byte", 60);
  expect_one_line_failure(ctune({"export", "--model", (dir / "smollm3").string(), "--out", out}), "no_rope_layers has no smollm3 GGUF form",
                          "smollm3 NoPE every 3rd layer");
  TinyConfig phi3;
  phi3.model_type = "phi3";
  phi3.head_dim = 32;  // 4 heads x 32 = 128 != hidden 64
  make_model(dir / "phi3", phi3, "byte", 61);
  expect_one_line_failure(ctune({"export", "--model", (dir / "phi3").string(), "--out", out}), "must equal hidden_size",
                          "phi3 heads x head_dim != hidden");
  TinyConfig gemma2;
  gemma2.model_type = "gemma2";
  gemma2.head_dim = 16;
  gemma2.extra = {{"query_pre_attn_scalar", 16}};
  make_model(dir / "gemma2", gemma2, "byte", 62);
  expect_one_line_failure(ctune({"export", "--model", (dir / "gemma2").string(), "--out", out}), "untied lm_head",
                          "gemma2 untied head");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

TEST(ExportCli, SentencePieceUnigramIsRefused) {
  const fs::path dir = model_variant("unigram", nullptr);
  const std::string train = std::string(CTUNE_SPM_TRAIN) + " --input=" + (source_dir() / ".." / "tokenizer" / "corpus.jsonl").string() +
                            " --model_prefix=" + (dir / "tokenizer").string() +
                            " --vocab_size=200 --model_type=unigram --minloglevel=2 --num_threads=1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(train.c_str()), 0) << train;
  fs::remove(dir / "tokenizer_config.json");
  expect_one_line_failure(ctune({"export", "--model", dir.string(), "--out", (base() / "u.gguf").string()}), "unigram",
                          "unigram model");
}

}  // namespace
}  // namespace ctune::exporter::test
