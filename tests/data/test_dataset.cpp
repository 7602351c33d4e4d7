// Dataset loading on the byte-level tokenizer: JSONL and JSON-array files, column names,
// every kind of malformed record refused with a typed error naming file:line (or the array
// index) or skipped and counted with on_error: skip, empty datasets and eval splits, the
// eval_fraction split (deterministic, disjoint), truncation and dropped examples, option
// parsing and validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/dataset.h"
#include "data/records.h"
#include "test_support.h"
#include "tokenizer/load.h"

namespace ctune::data::test {
namespace {

std::string instruct_line(int k) {
  return R"({"instruction": "Say )" + std::to_string(k) + R"(", "output": "Number )" + std::to_string(k) + "\"}";
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    options_.tokenizer_dir = byte_tokenizer_dir();
    options_.max_seq_len = 512;
  }
  std::filesystem::path file(const std::string& name, const std::string& text) {
    write_text(dir_ / name, text);
    return dir_ / name;
  }
  Datasets load() { return load_datasets(options_, byte_tokenizer()); }
  // The message of the error `load()` throws as E; fails the test when it throws nothing.
  template <typename E>
  std::string error() {
    try {
      load();
    } catch (const E& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error of the expected type";
    return "";
  }

  std::filesystem::path dir_;
  DataOptions options_;
};

TEST_F(DatasetTest, ReadsJsonlWithBlankLines) {
  options_.train = file("train.jsonl", instruct_line(0) + "\n\n" + instruct_line(1) + "\r\n   \n" + instruct_line(2));
  const Datasets ds = load();
  ASSERT_EQ(ds.train->size(), 3u);
  EXPECT_EQ((*ds.train)[2].record, 2);
  EXPECT_TRUE(ds.eval->empty());
  EXPECT_EQ(ds.instruct_template, InstructTemplate::alpaca);  // the byte tokenizer has no chat template
  EXPECT_EQ(ds.train_stats.records, 3);
  EXPECT_EQ(ds.train_stats.examples, 3);
  EXPECT_EQ(ds.train_stats.skipped, 0);
  EXPECT_GT(ds.train_stats.target_tokens, 3 * 8);
  EXPECT_EQ(ds.train_stats.straddles, 0);
}

TEST_F(DatasetTest, ReadsJsonArraysAndCustomColumns) {
  options_.train = file("train.json", R"(  [{"q": "a", "ctx": "b", "a": "c"}, {"q": "d", "a": "e"}])");
  options_.columns.instruction = "q";
  options_.columns.input = "ctx";
  options_.columns.output = "a";
  EXPECT_EQ(load().train->size(), 2u);
  options_.format = DataFormat::text;
  options_.columns.text = "body";
  options_.train = file("text.jsonl", R"({"body": "hello"})");
  const Datasets ds = load();
  EXPECT_EQ((*ds.train)[0].ids.size(), 7u);  // <s> hello </s>
}

TEST_F(DatasetTest, MalformedRecordsNameFileAndLine) {
  const std::string path = (dir_ / "train.jsonl").string();
  options_.train = file("train.jsonl", instruct_line(0) + "\n{\"instruction\": \"x\", \n");
  EXPECT_EQ(error<FormatError>().rfind(path + ":2: invalid JSON (", 0), 0u) << error<FormatError>();
  file("train.jsonl", instruct_line(0) + "\n{\"instruction\": 1e999, \"output\": \"x\"}\n");  // past double's range
  EXPECT_EQ(error<FormatError>().rfind(path + ":2: invalid JSON (number overflow", 0), 0u) << error<FormatError>();
  file("train.jsonl", instruct_line(0) + "\n" + instruct_line(1) + "\n{\"instruction\": \"x\"}\n");
  EXPECT_EQ(error<FormatError>(), path + ":3: missing key \"output\" (data.columns.output)");
  file("train.jsonl", R"({"instruction": "x", "output": 42})");
  EXPECT_EQ(error<FormatError>(), path + ":1: key \"output\" expected a string, found an integer (42) (data.columns.output)");
  file("train.jsonl", "[1]\n");  // a JSON array file whose element is not an object
  EXPECT_EQ(error<FormatError>(), path + "[0]: expected a JSON object, found an integer");
  file("train.jsonl", "\"just a string\"\n");
  EXPECT_EQ(error<FormatError>(), path + ":1: expected a JSON object, found a string");
}

TEST_F(DatasetTest, MalformedConversations) {
  options_.format = DataFormat::chat;
  const std::string path = (dir_ / "chat.jsonl").string();
  options_.train = file("chat.jsonl", R"({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]})");
  EXPECT_EQ(error<FormatError>(), path + ":1: messages[1].role: unknown role \"tool\" (expected system | user | assistant)");
  file("chat.jsonl", R"({"messages": [{"role": "user", "content": 5}]})");
  EXPECT_EQ(error<FormatError>(), path + ":1: messages[0].content: expected a string, found an integer");
  file("chat.jsonl", "\n" R"({"messages": []})");
  EXPECT_EQ(error<FormatError>(), path + ":2: messages is empty");
  file("chat.jsonl", R"({"conversation": []})");
  EXPECT_EQ(error<FormatError>(), path + ":1: missing key \"messages\" (data.columns.messages)");
  file("chat.jsonl", R"({"messages": [{"role": "user", "content": "a", "tool_calls": [{}]}]})");
  EXPECT_NE(error<FormatError>().find("tool_calls"), std::string::npos);
  options_.chat_format = ChatFormat::llama2;
  file("chat.jsonl", R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})" "\n"
                     R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})");
  EXPECT_EQ(error<FormatError>().rfind(path + ":2: messages[1] is user, expected assistant (llama2 format", 0), 0u)
      << error<FormatError>();
  file("chat.jsonl", R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]})");
  EXPECT_NE(error<FormatError>().find("only as the first message"), std::string::npos);
}

TEST_F(DatasetTest, JsonArrayElementErrorsNameTheIndex) {
  const std::string path = (dir_ / "train.json").string();
  options_.train = file("train.json", "[" + instruct_line(0) + ", 5, {\"instruction\": \"x\"}, " + instruct_line(3) + "]");
  EXPECT_EQ(error<FormatError>(), path + "[1]: expected a JSON object, found an integer");
  options_.on_error = OnError::skip;
  const Datasets ds = load();
  EXPECT_EQ(ds.train_stats.skipped, 2);
  EXPECT_EQ(ds.train->size(), 2u);
  ASSERT_EQ(ds.train_stats.first_errors.size(), 2u);
  EXPECT_EQ(ds.train_stats.first_errors[1], path + "[2]: missing key \"output\" (data.columns.output)");
  // A syntax error in an array file cannot be skipped record by record.
  file("train.json", "[" + instruct_line(0) + ", {]");
  EXPECT_EQ(error<FormatError>().rfind(path + ": invalid JSON", 0), 0u);
}

TEST_F(DatasetTest, SkipCountsMalformedRecords) {
  options_.on_error = OnError::skip;
  options_.train = file("train.jsonl", instruct_line(0) + "\nnot json\n" + R"({"instruction": "x"})" + "\n" +
                                           R"({"instruction": "x", "output": []})" + "\n" + instruct_line(4) + "\n");
  const Datasets ds = load();
  EXPECT_EQ(ds.train_stats.skipped, 3);
  EXPECT_EQ(ds.train_stats.records, 2);
  EXPECT_EQ(ds.train->size(), 2u);
  EXPECT_EQ((*ds.train)[1].record, 1);  // record indices count valid records only
  options_.format = DataFormat::chat;
  options_.chat_format = ChatFormat::llama2;
  file("train.jsonl", R"({"messages": [{"role": "assistant", "content": "a"}]})" "\n"
                      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})");
  EXPECT_EQ(load().train_stats.skipped, 1);
}

// Size and nesting attacks in a dataset: a record nested a million deep and a line past
// kMaxRecordBytes are each one malformed record (named file:line), skipped with on_error: skip
// without stopping the load, and the too-long line is not read whole.
TEST_F(DatasetTest, DeepAndHugeRecordsAreMalformedRecords) {
  const std::string deep = "{\"instruction\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  const std::string huge = R"({"instruction": ")" + std::string(kMaxRecordBytes + 10, 'x') + R"(", "output": "y"})";
  options_.train = file("attack.jsonl", instruct_line(0) + "\n" + deep + "\n" + huge + "\n" + instruct_line(3) + "\n");
  const std::string path = (dir_ / "attack.jsonl").string();
  const std::string first = error<FormatError>();
  EXPECT_NE(first.find(path + ":2: JSON nested deeper than"), std::string::npos) << first;
  options_.on_error = OnError::skip;
  const Datasets ds = load();
  EXPECT_EQ(ds.train_stats.skipped, 2);
  EXPECT_EQ(ds.train->size(), 2u);
  options_.on_error = OnError::error;
  options_.train = file("huge.jsonl", instruct_line(0) + "\n" + huge + "\n");
  const std::string second = error<FormatError>();
  EXPECT_NE(second.find((dir_ / "huge.jsonl").string() + ":2: a record longer than"), std::string::npos) << second;
}

// A tokenizer.json regex that backtracks catastrophically on a record's text stops at
// Oniguruma's backtracking limit (10^7 steps, about 0.3 s) instead of running for hours; the
// error names the record, and on_error: skip skips it like any malformed record.
TEST_F(DatasetTest, TokenizerRegexPastItsBacktrackingLimitNamesTheRecord) {
  const auto tok_dir = dir_ / "tok";
  std::filesystem::copy(byte_tokenizer_dir(), tok_dir, std::filesystem::copy_options::recursive);
  Json tj = read_json_file(tok_dir / "tokenizer.json");
  tj["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Split"}, {"pattern", {{"Regex", "(x+x+)+y"}}}, {"behavior", "Isolated"}, {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  write_text(tok_dir / "tokenizer.json", tj.dump());
  const auto tokenizer = tok::load_tokenizer(tok_dir);
  options_.tokenizer_dir = tok_dir;
  options_.format = DataFormat::text;
  options_.train = file("train.jsonl", R"({"text": "xxy ok"})" "\n" R"({"text": ")" + std::string(30, 'x') + "\"}\n");
  try {
    load_datasets(options_, *tokenizer);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "train.jsonl").string() + ":2: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retry-limit-in-match over"), std::string::npos) << e.what();
  }
  options_.on_error = OnError::skip;
  const Datasets ds = load_datasets(options_, *tokenizer);
  EXPECT_EQ(ds.train_stats.skipped, 1);
  EXPECT_EQ(ds.train->size(), 1u);
}

TEST_F(DatasetTest, EmptyDatasetsAreConfigErrors) {
  options_.train = file("empty.jsonl", "");
  EXPECT_NE(error<ConfigError>().find("no training examples (0 records)"), std::string::npos) << error<ConfigError>();
  file("empty.jsonl", "\n  \n");
  EXPECT_NE(error<ConfigError>().find("no training examples"), std::string::npos);
  options_.train = file("train.jsonl", instruct_line(0));
  options_.eval = file("eval.jsonl", "");
  EXPECT_NE(error<ConfigError>().find("eval.jsonl: no eval examples"), std::string::npos) << error<ConfigError>();
  options_.eval = file("eval.json", "[]");
  EXPECT_NE(error<ConfigError>().find("no eval examples"), std::string::npos);
  options_.eval.clear();
  options_.eval_fraction = 0.1;  // of one record: nothing
  EXPECT_NE(error<ConfigError>().find("gives an empty eval split"), std::string::npos) << error<ConfigError>();
  options_.eval = dir_ / "eval.jsonl";
  EXPECT_NE(error<ConfigError>().find("both set"), std::string::npos);
  options_.eval.clear();
  options_.eval_fraction = 0;
  options_.train = dir_ / "missing.jsonl";
  EXPECT_THROW(load(), IoError);
}

TEST_F(DatasetTest, ExamplesWithoutTargetAreDropped) {
  // max_seq_len shorter than the Alpaca prompt: no output token survives truncation.
  options_.train = file("train.jsonl", instruct_line(0) + "\n" + R"({"instruction": "x", "output": ""})");
  options_.max_seq_len = 40;
  const std::string msg = error<ConfigError>();
  EXPECT_NE(msg.find("no training examples (2 records, 2 without a trained token after truncation to 40 tokens)"),
            std::string::npos) << msg;
  options_.max_seq_len = 512;
  const Datasets ds = load();  // the empty output still trains its eos
  EXPECT_EQ(ds.train->size(), 2u);
  options_.max_seq_len = 160;
  file("train.jsonl", instruct_line(0) + "\n" + R"({"instruction": "x", "output": ")" + std::string(300, 'y') + "\"}");
  const Datasets cut = load();
  EXPECT_EQ(cut.train_stats.truncated, 1);
  EXPECT_EQ((*cut.train)[1].ids.size(), 160u);
}

TEST_F(DatasetTest, EvalFractionSplitIsDeterministicAndDisjoint) {
  std::string lines;
  for (int k = 0; k < 40; ++k) lines += instruct_line(k) + "\n";
  options_.train = file("train.jsonl", lines);
  options_.eval_fraction = 0.25;
  options_.seed = 7;
  const Datasets a = load(), b = load();
  ASSERT_EQ(a.eval->size(), 10u);
  ASSERT_EQ(a.train->size(), 30u);
  EXPECT_EQ(a.eval_stats.examples, 10);
  auto records = [](const Examples& ex) {
    std::vector<std::int64_t> r;
    for (const Example& e : *ex) r.push_back(e.record);
    return r;
  };
  EXPECT_EQ(records(a.eval), records(b.eval));
  std::set<std::int64_t> all;
  for (auto r : records(a.eval)) all.insert(r);
  for (auto r : records(a.train)) all.insert(r);
  EXPECT_EQ(all.size(), 40u);  // disjoint and complete
  const auto eval_records = records(a.eval);
  EXPECT_TRUE(std::is_sorted(eval_records.begin(), eval_records.end()));  // file order
  options_.seed = 8;
  EXPECT_NE(records(load().eval), records(a.eval));
}

TEST_F(DatasetTest, ChatTemplateInTheTokenizerDirSelectsTheFormat) {
  // A byte tokenizer with a ChatML template but without the ChatML tokens: refused clearly.
  const auto tok_dir = dir_ / "tok";
  std::filesystem::copy(byte_tokenizer_dir(), tok_dir, std::filesystem::copy_options::recursive);
  Json config = read_json_file(tok_dir / "tokenizer_config.json");
  config["chat_template"] = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  write_text(tok_dir / "tokenizer_config.json", config.dump());
  options_.tokenizer_dir = tok_dir;
  options_.train = file("train.jsonl", instruct_line(0));
  // auto: the tokenizer's own template renders the record (its markers are plain text to this
  // tokenizer, as they would be to transformers).
  EXPECT_EQ(load().chat.format, ChatFormat::model_template);
  // The native ChatML renderer needs <|im_start|> as a token.
  options_.chat_format = ChatFormat::chatml;
  EXPECT_NE(error<ConfigError>().find("\"<|im_start|>\" of the chat format is not in the tokenizer's vocabulary"),
            std::string::npos);
  options_.chat_format = ChatFormat::automatic;
  options_.instruct_template = InstructTemplate::alpaca;
  EXPECT_EQ(load().chat.format, ChatFormat::plain);  // unused: no chat rendering
  options_.format = DataFormat::chat;
  options_.chat_format = ChatFormat::plain;
  file("train.jsonl", R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})");
  EXPECT_EQ(load().train->size(), 1u);
}

TEST(DataOptions, ParseAndValidate) {
  EXPECT_EQ(parse_chat_format("qwen3"), ChatFormat::qwen3);
  EXPECT_EQ(parse_data_format("text"), DataFormat::text);
  EXPECT_EQ(to_string(ChatFormat::automatic), "auto");
  try {
    parse_chat_format("mistral");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "data.chat_format: unknown value \"mistral\" (expected auto | template | llama3 | chatml | qwen3 | llama2 | plain)");
  }
  EXPECT_THROW(parse_on_error("ignore"), ConfigError);
  EXPECT_THROW(parse_instruct_template("vicuna"), ConfigError);
  DataOptions o;
  o.train = "t.jsonl";
  EXPECT_NO_THROW(validate(o));
  o.eval_fraction = 1.0;
  EXPECT_THROW(validate(o), ConfigError);
  o.eval_fraction = 0;
  o.max_seq_len = 1;
  EXPECT_THROW(validate(o), ConfigError);
  o.max_seq_len = 8;
  o.batch_size = 0;
  EXPECT_THROW(validate(o), ConfigError);
  o.batch_size = 1;
  o.columns.output.clear();
  EXPECT_THROW(validate(o), ConfigError);
}

}  // namespace
}  // namespace ctune::data::test
