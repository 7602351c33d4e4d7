// write_byte_tokenizer: the file it writes loads back as a lossless byte-level tokenizer with
// GPT-2's byte order for ids 0..255 and <s>/</s> at 256/257, and Hugging Face's reference
// implementation (when the npm fixture is present) encodes the corpus with it to the same ids.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ctune::tok::test {
namespace {

std::filesystem::path written_dir() {
  static const std::filesystem::path dir = [] {
    auto d = scratch_dir("byte-tokenizer");
    write_byte_tokenizer(d);
    return d;
  }();
  return dir;
}

TEST(ByteTokenizer, LayoutAndSpecialTokens) {
  auto tok = load_tokenizer(written_dir());
  EXPECT_EQ(tok->kind(), "bpe-byte-level");
  EXPECT_TRUE(tok->lossless());
  EXPECT_EQ(tok->vocab_size(), 258u);
  EXPECT_EQ(tok->id_to_token(0), "!");
  EXPECT_EQ(tok->id_to_token(256), "<s>");
  EXPECT_EQ(tok->id_to_token(257), "</s>");
  EXPECT_EQ(tok->special().bos, 256);
  EXPECT_EQ(tok->special().eos, 257);
  EXPECT_TRUE(tok->special().add_bos);
  EXPECT_FALSE(tok->special().add_eos);
  // Byte b has the id of its position in GPT-2's order.
  const auto& order = gpt2_byte_order();
  for (int id = 0; id < 256; ++id) EXPECT_EQ(tok->token_to_id(byte_to_unicode()[order[id]]), id);
  const auto ids = tok->encode("hi!", true);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], 256);
  EXPECT_EQ(ids[3], 0);  // '!' is the first byte in GPT-2's order
  EXPECT_EQ(tok->encode("a</s>", false).back(), 257);
}

TEST(ByteTokenizer, LosslessOnTheCorpusAndAllCodePointLengths) {
  auto tok = load_tokenizer(written_dir());
  for (const std::string& x : load_corpus()) {
    const auto ids = tok->encode(x, false);
    EXPECT_EQ(tok->decode(ids), x) << show(x);
    if (x.find("<s>") == std::string::npos && x.find("</s>") == std::string::npos) {
      EXPECT_EQ(ids.size(), x.size()) << show(x);  // one token per byte
    }
  }
  std::string all;
  for (std::uint32_t cp : {0x01u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFDu, 0x10000u, 0x10FFFFu})
    append_utf8(all, cp);
  EXPECT_EQ(tok->decode(tok->encode(all, true), true), all);
}

// Named GoldenHf* so that CTest runs it after the npm fixture.
TEST(GoldenHfByteTokenizer, ReferenceImplementationAgrees) {
  const auto lib = npm_cache() / "huggingface-tokenizers-0.2.0" / "package" / "dist" / "tokenizers.mjs";
  if (!std::filesystem::exists(lib)) {
    FAIL() << lib << " is missing: the tokenizer_fetch fixture has not run (ctest -R tokenizer)";
  }
  const auto out = scratch_dir("byte-tokenizer-ref");
  const std::string cmd = std::string(CTUNE_NODE) + " " + CTUNE_TOKENIZER_SCRIPTS + "/hf_reference.mjs " +
                          npm_cache().string() + " " + corpus_path().string() + " " + out.string() +
                          " byte=" + written_dir().string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json ref = read_json_file(out / "byte.json");
  auto tok = load_tokenizer(written_dir());
  const auto corpus = load_corpus();
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    EXPECT_EQ(tok->encode(corpus[i], false), to_ids(ref["plain"][i])) << show(corpus[i]);
    EXPECT_EQ(tok->encode(corpus[i], true), to_ids(ref["special"][i])) << show(corpus[i]);
  }
}

}  // namespace
}  // namespace ctune::tok::test
