// BPE model and added-token unit tests on tiny hand-made tokenizer.json objects, where the
// expected ids follow directly from the merge ranks and the Rust crate's rules.
#include <gtest/gtest.h>

#include <ctime>
#include <thread>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/hf_tokenizer.h"

namespace ctune::tok::test {
namespace {

using Ids = std::vector<std::int32_t>;

Json tiny(Json vocab, Json merges, Json model_options = Json::object()) {
  Json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  for (auto& [k, v] : model_options.items()) model[k] = v;
  return {{"model", model},     {"normalizer", nullptr},     {"pre_tokenizer", nullptr},
          {"decoder", nullptr}, {"post_processor", nullptr}, {"added_tokens", Json::array()}};
}

Ids enc(const Json& root, const std::string& text) {
  return HfTokenizer(root, "test").encode(text, false);
}

const Json kAbc = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};

TEST(BpeModel, MergesApplyByRankLeftmostFirst) {
  EXPECT_EQ(enc(tiny(kAbc, {"a b", "b c", "ab c"}), "abc"), (Ids{5}));
  EXPECT_EQ(enc(tiny(kAbc, {"b c", "a b", "ab c"}), "abc"), (Ids{0, 4}));  // "a bc" is not a merge
  EXPECT_EQ(enc(tiny(kAbc, {"a a"}), "aaa"), (Ids{6, 0}));                 // equal ranks: leftmost wins
  EXPECT_EQ(enc(tiny(kAbc, Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"})})), "abcab"),
            (Ids{5, 3}));  // pair form
  EXPECT_EQ(enc(tiny(kAbc, Json::array()), "cab"), (Ids{2, 0, 1}));
}

TEST(BpeModel, UnknownCharactersByteFallbackAndUnk) {
  Json vocab = {{"<unk>", 0}, {"a", 1}, {"<0x78>", 2}, {"<0x79>", 3}};
  EXPECT_EQ(enc(tiny(vocab, Json::array(), {{"byte_fallback", true}, {"unk_token", "<unk>"}}), "axy"),
            (Ids{1, 2, 3}));
  // "z" has no byte token: unk, fused with its unknown neighbours when fuse_unk is set.
  EXPECT_EQ(enc(tiny(vocab, Json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}}), "azzqa"),
            (Ids{1, 0, 1}));
  EXPECT_EQ(enc(tiny(vocab, Json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", false}}), "azza"),
            (Ids{1, 0, 0, 1}));
  // No unk token: unknown characters are dropped, as in the Rust crate.
  EXPECT_EQ(enc(tiny(vocab, Json::array()), "aza"), (Ids{1, 1}));
}

TEST(BpeModel, IgnoreMergesAndAffixes) {
  Json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  EXPECT_EQ(enc(tiny(vocab, {"a b"}), "abc"), (Ids{3, 2}));
  EXPECT_EQ(enc(tiny(vocab, {"a b"}, {{"ignore_merges", true}}), "abc"), (Ids{4}));  // whole word is a token
  Json wordpiece_style = {{"a", 0}, {"##b", 1}, {"ab", 2}};
  EXPECT_EQ(enc(tiny(wordpiece_style, {"a ##b"}, {{"continuing_subword_prefix", "##"}}), "ab"), (Ids{2}));
  Json suffixed = {{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}};
  EXPECT_EQ(enc(tiny(suffixed, {"a b</w>"}, {{"end_of_word_suffix", "</w>"}}), "ab"), (Ids{2}));
  // Empty affixes (as Qwen's file writes them) change nothing.
  EXPECT_EQ(enc(tiny(vocab, {"a b"}, {{"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}}), "ab"),
            (Ids{3}));
}

TEST(BpeModel, LongWordIsNotQuadratic) {
  // SentencePiece-style files have no pre-tokenizer: a whole line is one word.
  Json vocab = {{"a", 0}};
  Json merges = Json::array();
  std::string piece = "a";
  for (int k = 1; k <= 12; ++k) {
    vocab[piece + piece] = k;
    merges.push_back(piece + " " + piece);
    piece += piece;
  }
  HfTokenizer tok(tiny(vocab, merges), "test");
  const std::string text(300000, 'a');
  const std::clock_t start = std::clock();
  Ids ids = tok.encode(text, false);
  const double cpu = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  // Each rank merges pairs left to right, so 300000 = 73 * 4096 + 512 + 256 + 128 + 64 + 32.
  EXPECT_EQ(ids.size(), 78u);
  EXPECT_EQ(ids.front(), 12);
  // CPU time, not wall time (docs/testing.md, "Time"): a quadratic merge of this word takes
  // minutes, the linear one a small fraction of a second, so 5 s only catches the former.
  EXPECT_LT(cpu, 5.0);
}

Json with_added(Json root, Json added) {
  root["added_tokens"] = std::move(added);
  return root;
}
Json added_token(const std::string& content, int id, Json flags = Json::object()) {
  Json t = {{"id", id},        {"content", content}, {"special", true},     {"normalized", false},
            {"lstrip", false}, {"rstrip", false},    {"single_word", false}};
  for (auto& [k, v] : flags.items()) t[k] = v;
  return t;
}

const Json kLetters = {{" ", 0}, {"a", 1}, {"b", 2}, {"x", 3}, {"<", 4}, {">", 5}, {"w", 6}};

TEST(AddedTokens, LeftmostLongestMatch) {
  Json root = with_added(tiny(kLetters, Json::array()), {added_token("<a>", 10), added_token("<a><b>", 11)});
  EXPECT_EQ(enc(root, "x<a><b>x<a>"), (Ids{3, 11, 3, 10}));
  EXPECT_EQ(enc(root, "<a<a>"), (Ids{4, 1, 10}));
}

TEST(AddedTokens, StripAndSingleWord) {
  Json root = with_added(tiny(kLetters, Json::array()), {added_token("<l>", 10, {{"lstrip", true}}),
                                                         added_token("<r>", 11, {{"rstrip", true}}),
                                                         added_token("w", 12, {{"single_word", true}})});
  EXPECT_EQ(enc(root, "a  <l> b"), (Ids{1, 10, 0, 2}));  // spaces before <l> are swallowed
  EXPECT_EQ(enc(root, "a <r>  b"), (Ids{1, 0, 11, 2}));  // spaces after <r> are swallowed
  EXPECT_EQ(enc(root, "a w b"), (Ids{1, 0, 12, 0, 2}));  // a whole word: the added token
  EXPECT_EQ(enc(root, "awb"), (Ids{1, 6, 2}));           // inside a word: plain text
}

TEST(AddedTokens, NormalizedTokensMatchNormalizedText) {
  Json root =
      with_added(tiny(kLetters, Json::array()),
                 {added_token("AB", 10, {{"normalized", true}, {"special", false}}), added_token("<X>", 11)});
  root["normalizer"] = {{"type", "Lowercase"}};
  // "AB" is matched after lowercasing ("ab"); "<X>" (not normalized) only in its raw form.
  EXPECT_EQ(enc(root, "xAbx<X>"), (Ids{3, 10, 3, 11}));
  EXPECT_EQ(enc(root, "<x>"), (Ids{4, 3, 5}));
  HfTokenizer tok(root, "test");
  EXPECT_EQ(tok.decode({3, 10, 11}, false), "x AB <X>");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok.decode({3, 10, 11}, true), "x AB");       // <X> is special, AB is not
  EXPECT_EQ(tok.token_to_id("<X>"), 11);
  EXPECT_EQ(tok.id_to_token(10), "AB");
  EXPECT_EQ(tok.vocab_size(), 12u);
}

TEST(HfTokenizer, InvalidUtf8IsRepairedNotFatal) {
  Json vocab = {{"a", 0}, {"\xEF\xBF\xBD", 1}};
  EXPECT_EQ(enc(tiny(vocab, Json::array()),
                "a\xFF"
                "a"),
            (Ids{0, 1, 0}));
}

TEST(HfTokenizer, ConcurrentEncodingIsConsistent) {
  Json vocab = kAbc;
  Json root = tiny(vocab, {"a b", "b c", "ab c", "a a"});
  root["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  HfTokenizer tok(root, "test");
  std::string text;
  for (int i = 0; i < 2000; ++i) text += std::string(1 + i % 7, "abc"[i % 3]) + (i % 5 ? "bc " : "a ");
  const Ids expected = tok.encode(text, false);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { results[t] = tok.encode(text, false); });
  for (auto& th : threads) th.join();
  for (const Ids& r : results) EXPECT_EQ(r, expected);
}

}  // namespace
}  // namespace ctune::tok::test
