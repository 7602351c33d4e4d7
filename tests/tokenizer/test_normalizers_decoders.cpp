// Normalizer, decoder and post-processor unit tests, expected values written out by hand from
// the Rust crate's behaviour (and from Unicode's normalisation and casing rules).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/utf8.h"
#include "test_support.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/unicode.h"

namespace ctune::tok::test {
namespace {

std::string norm(const Json& config, const std::string& text) {
  return make_normalizer(config, "test")->normalize(text);
}

std::string dec(const Json& config, std::vector<std::string> tokens) {
  make_decoder(config, "test")->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(Normalizers, UnicodeForms) {
  const std::string composed = "\xC3\xA9", decomposed = "e\xCC\x81";  // é
  EXPECT_EQ(norm({{"type", "NFC"}}, decomposed), composed);
  EXPECT_EQ(norm({{"type", "NFD"}}, composed), decomposed);
  EXPECT_EQ(norm({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");  // ﬁ ligature
  EXPECT_EQ(norm({{"type", "NFKD"}}, "\xE2\x91\xA0"), "1");   // ①
  EXPECT_EQ(norm({{"type", "NFC"}}, "plain ascii"), "plain ascii");
  EXPECT_EQ(norm({{"type", "NFKC"}}, "\xEF\xBD\xB6"), "\xE3\x82\xAB");  // half-width ｶ -> カ
}

TEST(Normalizers, LowercaseUsesFullUnicodeRules) {
  Json lower = {{"type", "Lowercase"}};
  EXPECT_EQ(norm(lower, "HeLLo"), "hello");
  EXPECT_EQ(norm(lower, "\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"),
            "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");                                   // ΟΔΟΣ -> οδος
  EXPECT_EQ(norm(lower, "\xCE\xA3"), "\xCF\x83");                                  // lone Σ -> σ
  EXPECT_EQ(norm(lower, "\xC4\xB0"), "i\xCC\x87");                                 // İ
  EXPECT_EQ(norm(lower, "\xD0\x9F\xD0\xA0\xD0\x98"), "\xD0\xBF\xD1\x80\xD0\xB8");  // ПРИ
}

TEST(Normalizers, ReplacePrependStripSequence) {
  Json llama2 = {{"type", "Sequence"},
                 {"normalizers",
                  {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                   {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(norm(llama2, "Hey friend"),
            "\xE2\x96\x81Hey\xE2\x96\x81"
            "friend");
  EXPECT_EQ(norm(llama2, ""), "");  // Prepend leaves an empty string empty
  EXPECT_EQ(norm({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}, "a \t\n b"),
            "a b");
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \xE3\x80\x80 x "),
            "x ");
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, "\t x \n"), "x");
  EXPECT_EQ(norm({{"type", "StripAccents"}}, "e\xCC\x81t\xC3\xA9"), "et\xC3\xA9");  // only combining marks go
  EXPECT_THROW(make_normalizer({{"type", "BertNormalizer2"}}, "x"), UnsupportedError);
  EXPECT_THROW(make_normalizer({{"type", "Replace"}, {"pattern", {{"String", " "}}}}, "x"), FormatError);
  EXPECT_EQ(make_normalizer(Json(), "x"), nullptr);
}

TEST(Decoders, ByteLevelIsLossyOnlyForInvalidUtf8) {
  Json bl = {{"type", "ByteLevel"}};
  EXPECT_EQ(dec(bl, {"Hello", "\xC4\xA0world"}), "Hello world");
  EXPECT_EQ(dec(bl, {"\xC3\xA2\xC4\xA4", "\xC2\xAC"}), "\xE2\x82\xAC");  // € (âĤ ¬) over two tokens
  EXPECT_EQ(dec(bl, {"\xC3\xA2"}), "\xEF\xBF\xBD");                      // lone lead byte
  EXPECT_EQ(dec(bl, {"<|eot_id|>"}), "<|eot_id|>");
  EXPECT_EQ(dec(bl, {"\xE2\x96\x81x"}), "\xE2\x96\x81x");  // not byte-level characters: kept as is
}

TEST(Decoders, Llama2Chain) {
  Json chain = {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(dec(chain, {"\xE2\x96\x81Hey",
                        "\xE2\x96\x81"
                        "friend"}),
            "Hey friend");
  EXPECT_EQ(dec(chain, {"\xE2\x96\x81", "<0xE2>", "<0x82>", "<0xAC>"}), "\xE2\x82\xAC");
  EXPECT_EQ(dec(chain, {"<0xE2>", "a"}),
            "\xEF\xBF\xBD"
            "a");  // invalid run: one U+FFFD per byte
  EXPECT_EQ(dec(chain, {"<0xE2>", "<0x82>", "a"}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(dec(chain, {"\xE2\x96\x81\xE2\x96\x81x"}), " x");  // Strip removes one space
}

TEST(Decoders, MetaspaceStripAndBpeSuffix) {
  EXPECT_EQ(dec({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}},
                {"\xE2\x96\x81Hey",
                 "\xE2\x96\x81"
                 "friend!"}),
            "Hey friend!");
  EXPECT_EQ(dec({{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "never"}}, {"_Hey", "_you"}),
            " Hey you");
  EXPECT_EQ(dec({{"type", "Strip"}, {"content", "x"}, {"start", 2}, {"stop", 1}}, {"xxxaxx"}), "xax");
  EXPECT_EQ(dec({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "you</w>"}), "hello you");
  EXPECT_THROW(make_decoder({{"type", "CTC2"}}, "x"), UnsupportedError);
}

TEST(PostProcessors, TemplatesGiveBosAndEos) {
  Json tmpl = {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                 {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
               {"special_tokens",
                {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                 {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  auto t = read_post_processor(tmpl, "x");
  EXPECT_EQ(t.prefix, (std::vector<std::int32_t>{1}));
  EXPECT_EQ(t.suffix, (std::vector<std::int32_t>{2}));
  tmpl["single"] = "<s> $A";
  t = read_post_processor(tmpl, "x");
  EXPECT_EQ(t.prefix, (std::vector<std::int32_t>{1}));
  EXPECT_TRUE(t.suffix.empty());
  Json seq = {{"type", "Sequence"}, {"processors", {{{"type", "ByteLevel"}}, tmpl}}};
  EXPECT_EQ(read_post_processor(seq, "x").prefix, (std::vector<std::int32_t>{1}));
  auto bert = read_post_processor(
      {{"type", "BertProcessing"}, {"cls", {"[CLS]", 101}}, {"sep", {"[SEP]", 102}}}, "x");
  EXPECT_EQ(bert.prefix, (std::vector<std::int32_t>{101}));
  EXPECT_EQ(bert.suffix, (std::vector<std::int32_t>{102}));
  tmpl["single"] = "<s> $A <t>";
  EXPECT_THROW(read_post_processor(tmpl, "x"), FormatError);  // <t> is not in special_tokens
  EXPECT_THROW(read_post_processor({{"type", "Unknown"}}, "x"), UnsupportedError);
}

TEST(Unicode, Utf8RepairAndClasses) {
  EXPECT_EQ(repair_utf8("a\xFF"
                        "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(repair_utf8("\xE2\x82"), "\xEF\xBF\xBD");  // truncated sequence: one replacement
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(find_invalid_utf8("ok \xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0xFEFF));
  EXPECT_TRUE(is_numeric(0x0661));                // Arabic-Indic one
  EXPECT_EQ(byte_to_unicode()[' '], "\xC4\xA0");  // Ġ
  EXPECT_EQ(unicode_to_byte(0x120), ' ');
  EXPECT_EQ(gpt2_byte_order()[0], '!');
}

}  // namespace
}  // namespace ctune::tok::test
