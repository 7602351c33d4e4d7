// Pre-tokenizer unit tests with expected pieces written out by hand from the Rust crate's
// documented behaviour, plus the two places where Oniguruma (what the Rust crate runs, and what
// we run) and the JavaScript reference's regex engine disagree.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/pre_tokenizers.h"

namespace ctune::tok::test {
namespace {

using Pieces = std::vector<std::string>;

Pieces run(const Json& config, const std::string& text, bool at_start = true) {
  auto pt = make_pre_tokenizer(config, "test");
  std::vector<PreToken> pieces{{text, at_start}};
  pt->pre_tokenize(pieces);
  Pieces out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

Json split(const std::string& literal, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", literal}}}, {"behavior", behavior}, {"invert", invert}};
}

// The example of the Rust crate's SplitDelimiterBehavior documentation.
TEST(SplitPreTokenizer, DelimiterBehaviours) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(run(split("-", "Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(run(split("-", "Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(split("-", "MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(split("-", "MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(split("-", "Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(SplitPreTokenizer, InvertKeepsMatchesAsContent) {
  // invert: the matches are the content and the text between them the delimiters.
  Json cfg = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Removed"}, {"invert", true}};
  EXPECT_EQ(run(cfg, "Hello, world!"), (Pieces{"Hello", "world"}));
  cfg["behavior"] = "MergedWithPrevious";
  EXPECT_EQ(run(cfg, "Hello, world!"), (Pieces{"Hello, ", "world!"}));
}

TEST(SplitPreTokenizer, Llama3PatternGroupsDigitsAndContractions) {
  Json cfg = {{"type", "Split"},
              {"pattern",
               {{"Regex",
                 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
              {"behavior", "Isolated"},
              {"invert", false}};
  EXPECT_EQ(run(cfg, "I'LL pay 1234567 now  \n\nok"),
            (Pieces{"I", "'LL", " pay", " ", "123", "456", "7", " now", "  \n\n", "ok"}));
  EXPECT_EQ(run(cfg, "x  y"), (Pieces{"x", " ", " y"}));  // \s+(?!\S) leaves the last space to the word
}

// Divergence 1: Oniguruma 6.9.8 (bundled by the Rust crate's onig-sys, and Debian's libonig)
// has Unicode 14 tables; Node's regex engine knows newer scripts. U+1E4D0 (Nag Mundari, Unicode
// 15) is not \p{L} for Oniguruma, so it starts a new piece ([^\r\n\p{L}\p{N}]?\p{L}+); the JS
// reference keeps "a\U0001E4D0b" whole. We follow Oniguruma, i.e. the Rust crate.
TEST(SplitPreTokenizer, UnicodeVersionFollowsOniguruma) {
  Json cfg = {
      {"type", "Split"},
      {"pattern", {{"Regex", "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"}}},
      {"behavior", "Isolated"},
      {"invert", false}};
  EXPECT_EQ(run(cfg,
                "a\xF0\x9E\x93\x90"
                "b"),
            (Pieces{"a",
                    "\xF0\x9E\x93\x90"
                    "b"}));
  EXPECT_EQ(run(cfg,
                "a\xCE\xB1"
                "b"),
            (Pieces{"a\xCE\xB1"
                    "b"}));  // Greek alpha: a letter everywhere
}

// Divergence 2: the JS reference runs the GPT-2 ByteLevel regex with JavaScript's own \s, which
// includes U+FEFF and excludes U+0085; Oniguruma's \s is Unicode White_Space (U+0085 yes,
// U+FEFF no), as in the Rust crate.
TEST(ByteLevelPreTokenizer, Gpt2RegexWhitespaceIsUnicodeWhiteSpace) {
  Json cfg = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  // "x \u00851": NEL is whitespace, so the space and NEL are pieces of their own ("x", " ",
  // "\u0085", "1"); with JavaScript's \s the reference gets "x", " \u0085", "1".
  EXPECT_EQ(run(cfg,
                "x \xC2\x85"
                "1")
                .size(),
            4u);
  // "a \uFEFFb": BOM is not whitespace, so " \uFEFF" is one punctuation-like piece ("a",
  // " \uFEFF", "b"); the reference splits " ", "\uFEFF", "b".
  EXPECT_EQ(run(cfg,
                "a \xEF\xBB\xBF"
                "b")
                .size(),
            3u);
}

TEST(ByteLevelPreTokenizer, MapsBytesAndAddsPrefixSpace) {
  Json cfg = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(run(cfg, "Hello my friend"), (Pieces{"\xC4\xA0Hello", "\xC4\xA0my",
                                                 "\xC4\xA0"
                                                 "friend"}));
  cfg["add_prefix_space"] = false;
  EXPECT_EQ(run(cfg, "Hello my friend"), (Pieces{"Hello", "\xC4\xA0my",
                                                 "\xC4\xA0"
                                                 "friend"}));
  cfg["use_regex"] = false;
  EXPECT_EQ(run(cfg, "a b\n"), (Pieces{"a\xC4\xA0"
                                       "b\xC4\x8A"}));
}

TEST(MetaspacePreTokenizer, ReplacesSpacesAndSplits) {
  Json cfg = {
      {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(run(cfg, "Hey friend!"), (Pieces{"\xE2\x96\x81Hey",
                                             "\xE2\x96\x81"
                                             "friend!"}));
  EXPECT_EQ(run(cfg, "Hey   friend!"), (Pieces{"\xE2\x96\x81Hey", "\xE2\x96\x81", "\xE2\x96\x81",
                                               "\xE2\x96\x81"
                                               "friend!"}));
  cfg["split"] = false;
  EXPECT_EQ(run(cfg, "Hey friend!"), (Pieces{"\xE2\x96\x81Hey\xE2\x96\x81"
                                             "friend!"}));
  cfg["prepend_scheme"] = "first";
  EXPECT_EQ(run(cfg, "Hey", true), (Pieces{"\xE2\x96\x81Hey"}));
  EXPECT_EQ(run(cfg, "Hey", false), (Pieces{"Hey"}));  // not at the start of the input
  cfg["prepend_scheme"] = "never";
  EXPECT_EQ(run(cfg, "Hey", true), (Pieces{"Hey"}));
  // Legacy files: add_prefix_space instead of prepend_scheme.
  Json legacy = {{"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", false}};
  EXPECT_EQ(run(legacy, "a b"), (Pieces{"a", "_b"}));
}

TEST(OtherPreTokenizers, DigitsWhitespacePunctuation) {
  EXPECT_EQ(run({{"type", "Digits"}, {"individual_digits", true}}, "Call 123 please"),
            (Pieces{"Call ", "1", "2", "3", " please"}));
  EXPECT_EQ(run({{"type", "Digits"}, {"individual_digits", false}}, "Call 123 please"),
            (Pieces{"Call ", "123", " please"}));
  EXPECT_EQ(run({{"type", "Whitespace"}}, "Hey man!  How's it?"),
            (Pieces{"Hey", "man", "!", "How", "'", "s", "it", "?"}));
  EXPECT_EQ(run({{"type", "WhitespaceSplit"}}, "Hey man!\t ok"), (Pieces{"Hey", "man!", "ok"}));
  EXPECT_EQ(run({{"type", "Punctuation"}, {"behavior", "Isolated"}}, "Hey, man!!"),
            (Pieces{"Hey", ",", " man", "!", "!"}));
  EXPECT_EQ(run({{"type", "BertPreTokenizer"}}, "Hey, man!"), (Pieces{"Hey", ",", "man", "!"}));
  Json seq = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(run(seq, "ab12 c3"), (Pieces{"ab", "1", "2", "c", "3"}));
}

TEST(PreTokenizerConfig, ErrorsNameTheProblem) {
  try {
    make_pre_tokenizer({{"type", "Whitespace2"}}, "tokenizer.json: pre_tokenizer");
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("\"Whitespace2\" is not supported (supported: Sequence, Split"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_pre_tokenizer(split("-", "Sideways"), "x"), UnsupportedError);
  EXPECT_THROW(make_pre_tokenizer(
                   {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}, "x"),
               FormatError);
  EXPECT_THROW(make_pre_tokenizer({{"type", "Split"}, {"pattern", "-"}, {"behavior", "Isolated"}}, "x"),
               FormatError);
  EXPECT_THROW(make_pre_tokenizer({{"type", "Metaspace"}, {"replacement", "ab"}}, "x"), FormatError);
  EXPECT_THROW(make_pre_tokenizer(Json::array(), "x"), FormatError);
}

}  // namespace
}  // namespace ctune::tok::test
