// Tokenizers in GGUF form, from the real files (fixture tokenizer_npm: Llama-3, Qwen3, Llama-2
// tokenizer.json) and a trained SentencePiece model (fixture export_spm): model kind,
// pre-tokenizer, token strings and types, merges, scores, special ids and flags, padding up to
// the embedding size. The protobuf reader of tokenizer.model is checked against
// libsentencepiece's own view of the same file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "export/gguf_vocab.h"
#include "export/spm_model_file.h"
#include "export_test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::exporter::test {
namespace {
namespace fs = std::filesystem;

model::ModelConfig config_with_vocab(std::int64_t vocab) {
  model::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = vocab;
  return c;
}

TEST(GgufVocab, Llama3ByteLevel) {
  const GgufVocab v = read_gguf_vocab(real_tokenizer("llama3"), config_with_vocab(128256));
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "llama-bpe");
  ASSERT_EQ(v.tokens.size(), 128256u);
  EXPECT_EQ(v.types.size(), 128256u);
  EXPECT_TRUE(v.scores.empty());
  EXPECT_EQ(v.merges.size(), 280147u);
  EXPECT_EQ(v.merges[0], "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
  EXPECT_EQ(v.tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(v.types[128000], kControl);
  EXPECT_EQ(v.types[128009], kControl);
  EXPECT_EQ(v.tokens[40], "I");
  EXPECT_EQ(v.types[40], kNormal);
  EXPECT_EQ(v.bos, 128000);
  EXPECT_EQ(v.eos, 128001);
  // This copy's post_processor is a plain ByteLevel (no template adding <|begin_of_text|>), so
  // ctune does not add bos and neither may llama.cpp.
  EXPECT_EQ(v.add_bos, tok::load_tokenizer(real_tokenizer("llama3"))->special().add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_FALSE(v.pad.has_value());
  ASSERT_TRUE(v.chat_template.has_value());
  EXPECT_NE(v.chat_template->find("start_header_id"), std::string::npos);
}

TEST(GgufVocab, Qwen3PaddedToTheEmbedding) {
  const GgufVocab v = read_gguf_vocab(real_tokenizer("qwen3"), config_with_vocab(151936));
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "qwen2");
  ASSERT_EQ(v.tokens.size(), 151936u);
  EXPECT_EQ(v.tokens[151645], "<|im_end|>");
  EXPECT_EQ(v.types[151645], kControl);
  EXPECT_EQ(v.tokens[151935], "[PAD151935]");
  EXPECT_EQ(v.types[151935], kUnused);
  EXPECT_FALSE(v.bos.has_value());
  EXPECT_EQ(v.eos, 151645);
  EXPECT_EQ(v.pad, 151643);
  EXPECT_FALSE(v.add_bos);
  EXPECT_THROW(read_gguf_vocab(real_tokenizer("qwen3"), config_with_vocab(151000)), ConfigError);
}

TEST(GgufVocab, Llama2SentencePieceStyleJson) {
  const GgufVocab v = read_gguf_vocab(real_tokenizer("llama2"), config_with_vocab(32000));
  EXPECT_EQ(v.model, "llama");
  EXPECT_TRUE(v.pre.empty());
  ASSERT_EQ(v.tokens.size(), 32000u);
  ASSERT_EQ(v.scores.size(), 32000u);
  EXPECT_TRUE(v.merges.empty());
  EXPECT_EQ(v.types[0], kUnknown);
  EXPECT_EQ(v.types[1], kControl);
  EXPECT_EQ(v.types[2], kControl);
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.types[3], kByte);
  EXPECT_EQ(v.types[258], kByte);
  EXPECT_EQ(v.types[259], kNormal);
  EXPECT_EQ(v.add_space_prefix, true);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_TRUE(v.add_bos);
  // Scores are minus the rank of the merge that makes a token, so llama.cpp's highest-score-first
  // merging follows the file's merge order (Llama-2 lists the whitespace merges last).
  auto score_of = [&](const std::string& token) {
    auto it = std::find(v.tokens.begin(), v.tokens.end(), token);
    return it == v.tokens.end() ? 1.0f : v.scores[static_cast<std::size_t>(it - v.tokens.begin())];
  };
  EXPECT_EQ(score_of("\xE2\x96\x81t"), 0.0f);  // "▁t": merges[0] is "▁ t"
  EXPECT_EQ(score_of("in"), -1.0f);
  EXPECT_EQ(score_of("er"), -2.0f);
  EXPECT_EQ(v.scores[259], -58876.0f);  // "▁▁"
  for (float s : v.scores) EXPECT_LE(s, 0.0f);
}

TEST(GgufVocab, SentencePieceModelFile) {
  const fs::path dir = spm_model_dir();
  const auto m = read_spm_model_file(dir / "tokenizer.model");
  auto tokenizer = tok::load_tokenizer(dir / "tokenizer.model");
  ASSERT_EQ(m.pieces.size(), tokenizer->vocab_size());
  for (std::size_t id = 0; id < m.pieces.size(); ++id)
    ASSERT_EQ(m.pieces[id].piece, tokenizer->id_to_token(static_cast<std::int32_t>(id))) << "id " << id;
  EXPECT_EQ(m.model_type, 2);
  EXPECT_TRUE(m.byte_fallback);
  EXPECT_TRUE(m.add_dummy_prefix);
  EXPECT_FALSE(m.remove_extra_whitespaces);
  EXPECT_EQ(m.pieces[0].type, kUnknown);
  EXPECT_EQ(m.pieces[1].type, kControl);
  EXPECT_EQ(m.pieces[3].piece, "<0x00>");
  EXPECT_EQ(m.pieces[3].type, kByte);
  float previous = 1.0f;
  for (const auto& p : m.pieces) {
    if (p.type != kNormal) continue;
    EXPECT_LT(p.score, previous) << p.piece;  // BPE pieces in merge order
    previous = p.score;
  }

  const GgufVocab v = read_gguf_vocab(dir, config_with_vocab(1000));
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens[500], m.pieces[500].piece);
  EXPECT_EQ(v.scores[500], m.pieces[500].score);
  EXPECT_EQ(v.add_space_prefix, true);
  EXPECT_EQ(v.remove_extra_whitespaces, false);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
}

TEST(GgufVocab, SpmReaderRefusesGarbage) {
  EXPECT_THROW(read_spm_model_bytes(std::string("\x0a\xff\xff\xff\x0f", 5), "x.model"), FormatError);
  EXPECT_THROW(read_spm_model_bytes("", "x.model"), FormatError);  // no pieces
  EXPECT_THROW(read_spm_model_bytes(std::string("\x0b", 1), "x.model"), FormatError);  // wire type 3
  // One piece "a" with score -1.5 and type 4 (user defined); add_dummy_prefix false.
  const std::string ok = std::string("\x0a\x0a\x0a\x01" "a" "\x15\x00\x00\xc0\xbf" "\x18\x04", 12) +
                         std::string("\x1a\x02\x18\x00", 4);
  const auto m = read_spm_model_bytes(ok, "x.model");
  ASSERT_EQ(m.pieces.size(), 1u);
  EXPECT_EQ(m.pieces[0].piece, "a");
  EXPECT_EQ(m.pieces[0].score, -1.5f);
  EXPECT_EQ(m.pieces[0].type, kUserDefined);
  EXPECT_FALSE(m.add_dummy_prefix);
  EXPECT_TRUE(m.remove_extra_whitespaces);
  EXPECT_EQ(m.model_type, 1);
}

}  // namespace
}  // namespace ctune::exporter::test
