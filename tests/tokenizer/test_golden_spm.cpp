// Golden test of the SentencePiece path (libctune_spm.so behind dlopen) against the sentencepiece
// Python module, on two models spm_train builds from the corpus (spm_reference.py): ids for every
// corpus string, bos handling, and the lossless round trip of the Llama-2-style BPE model.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <memory>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::tok::test {
namespace {

std::filesystem::path model_path(const std::string& name) {
  return data_dir() / "spm" / (name + ".model");
}

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = load_tokenizer(model_path(name));
  return *slot;
}

class GoldenSpm : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenSpm, EncodeMatchesReference) {
  Json ref = load_reference(data_dir() / "spm" / (GetParam() + ".json"));
  if (ref.is_null()) return;
  const auto corpus = load_corpus();
  ASSERT_EQ(ref["ids"].size(), corpus.size()) << "reference is stale: rerun the fixture";
  const Tokenizer& tok = tokenizer(GetParam());
  EXPECT_EQ(tok.kind(), "sentencepiece");
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const auto ours = tok.encode(corpus[i], false);
    const auto want = to_ids(ref["ids"][i]);
    if (ours != want && ++mismatches <= 3) {
      ADD_FAILURE() << GetParam() << " string #" << i << " " << show(corpus[i])
                    << "\n  ours: " << show_ids(ours) << "\n  ref:  " << show_ids(want);
    }
    std::vector<std::int32_t> with_bos = want;
    with_bos.insert(with_bos.begin(), *tok.special().bos);
    EXPECT_EQ(tok.encode(corpus[i], true), with_bos) << "string #" << i;
  }
  EXPECT_EQ(mismatches, 0u);
  std::cout << "[ golden   ] spm " << GetParam() << ": " << corpus.size() - mismatches << "/" << corpus.size()
            << " strings identical to python sentencepiece\n";
}

TEST_P(GoldenSpm, RoundTripWhenLossless) {
  const Tokenizer& tok = tokenizer(GetParam());
  // The BPE model is trained like Llama-2's (identity normalisation, byte fallback): lossless.
  // The unigram model folds whitespace and applies NFKC: not lossless.
  EXPECT_EQ(tok.lossless(), GetParam() == "bpe");
  if (!tok.lossless()) return;
  const auto corpus = load_corpus();
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string& x = corpus[i];
    EXPECT_EQ(tok.decode(tok.encode(x, false)), x) << "string #" << i << " " << show(x);
    // skip_special drops the added <s> and also control-piece text the string itself contains.
    const bool has_control = x.find("<s>") != std::string::npos || x.find("</s>") != std::string::npos ||
                             x.find("<unk>") != std::string::npos || x.find("<pad>") != std::string::npos;
    if (!has_control) {
      EXPECT_EQ(tok.decode(tok.encode(x, true), true), x) << "string #" << i << " " << show(x);
    }
  }
}

TEST_P(GoldenSpm, VocabularyLookups) {
  const Tokenizer& tok = tokenizer(GetParam());
  EXPECT_EQ(tok.token_to_id("<s>"), tok.special().bos);
  EXPECT_EQ(tok.token_to_id("</s>"), tok.special().eos);
  EXPECT_EQ(tok.token_to_id("<unk>"), tok.special().unk);
  EXPECT_FALSE(tok.token_to_id("certainly not a piece").has_value());
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(tok.vocab_size()); id += 97) {
    EXPECT_EQ(tok.token_to_id(tok.id_to_token(id)), id);
  }
  EXPECT_THROW(tok.id_to_token(static_cast<std::int32_t>(tok.vocab_size())), FormatError);
  EXPECT_THROW(tok.decode({1, -1}), FormatError);
  EXPECT_THROW(tok.decode({static_cast<std::int32_t>(tok.vocab_size())}), FormatError);
  // Control pieces in the text map to their ids and decode back to their text.
  auto ids = tok.encode("a</s>b", false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), *tok.special().eos), ids.end());
  EXPECT_EQ(tok.decode(ids, true).find("</s>"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(TrainedModels, GoldenSpm, ::testing::Values("bpe", "unigram"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ctune::tok::test
