// Preference records (data.format: preference) on the byte-level tokenizer (<s> 256, </s> 257,
// add_bos): the standard and conversational forms give prompt + chosen then prompt + rejected
// with only the response trained, pairs stay together through the eval split, shuffling and
// batching, data.truncation's four rules, identical pairs dropped, and every malformed record
// refused with one error naming the record and the field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "test_support.h"

namespace ctune::data::test {
namespace {

std::string pair_line(int k, const std::string& rejected_suffix = "!") {
  return R"({"prompt": "Say )" + std::to_string(k) + R"(: ", "chosen": "ok )" + std::to_string(k) + R"(", "rejected": "no )" +
         std::to_string(k) + rejected_suffix + "\"}";
}

class PreferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    options_.tokenizer_dir = byte_tokenizer_dir();
    options_.format = DataFormat::preference;
    options_.max_seq_len = 512;
  }
  std::filesystem::path file(const std::string& name, const std::string& text) {
    write_text(dir_ / name, text);
    return dir_ / name;
  }
  Datasets load() { return load_datasets(options_, byte_tokenizer()); }
  std::string format_error(const std::string& line) {
    options_.train = file("bad.jsonl", pair_line(0) + "\n" + line + "\n");
    try {
      load();
    } catch (const FormatError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no FormatError for " << line;
    return "";
  }
  // The trained tokens of an example, decoded (special tokens as their text: eos is </s>).
  static std::string trained(const Example& e) {
    std::vector<std::int32_t> ids;
    for (std::size_t t = 0; t < e.ids.size(); ++t)
      if (e.labels[t] != kIgnoreIndex) ids.push_back(e.ids[t]);
    return byte_tokenizer().decode(ids, false);
  }

  std::filesystem::path dir_;
  DataOptions options_;
};

TEST_F(PreferenceTest, StandardFormPairsTrainOnlyTheResponseAndItsEos) {
  options_.train = file("train.jsonl", pair_line(0) + "\n" + pair_line(1) + "\n");
  const Datasets ds = load();
  ASSERT_EQ(ds.train->size(), 4u);
  const auto& ex = *ds.train;
  EXPECT_EQ(trained(ex[0]), "ok 0</s>");
  EXPECT_EQ(trained(ex[1]), "no 0!</s>");
  EXPECT_EQ(ex[0].ids.front(), 256);  // bos: the tokenizer adds one
  EXPECT_EQ(ex[0].record, 0);
  EXPECT_EQ(ex[1].record, 0);
  EXPECT_EQ(ex[2].record, 1);
  EXPECT_EQ(ds.train_stats.records, 2);
  EXPECT_EQ(ds.train_stats.examples, 4);
  // The prompt is the same tokens in both.
  EXPECT_TRUE(std::equal(ex[0].ids.begin(), ex[0].ids.begin() + 8, ex[1].ids.begin()));
}

TEST_F(PreferenceTest, ConversationalFormRendersTheResponseAfterTheGenerationPrompt) {
  options_.chat_format = ChatFormat::plain;  // the byte tokenizer has no chat template
  options_.train = file("train.jsonl",
                        R"({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],)"
                        R"( "chosen": [{"role": "assistant", "content": "Hello"}], "rejected": "Go away"})" "\n");
  const Datasets ds = load();
  ASSERT_EQ(ds.train->size(), 2u);
  // plain renders an assistant turn "\nAssistant: <content>" + eos; the generation prompt ends
  // at "Assistant:", so the response is " Hello" and its eos.
  EXPECT_EQ(trained((*ds.train)[0]), " Hello</s>");
  EXPECT_EQ(trained((*ds.train)[1]), " Go away</s>");
}

TEST_F(PreferenceTest, PairsStayTogetherThroughSplitsShufflingAndBatches) {
  std::string lines;
  for (int k = 0; k < 21; ++k) lines += pair_line(k) + "\n";
  options_.train = file("train.jsonl", lines);
  options_.eval_fraction = 0.25;
  options_.seed = 3;
  options_.batch_size = 2;  // pairs
  const Datasets ds = load();
  for (const Examples* split : {&ds.train, &ds.eval}) {
    ASSERT_EQ((*split)->size() % 2, 0u);
    for (std::size_t i = 0; i < (*split)->size(); i += 2) EXPECT_EQ((**split)[i].record, (**split)[i + 1].record);
  }
  Sampler sampler(ds.train, sampler_options(options_, byte_tokenizer()));
  for (int b = 0; b < 12; ++b) {
    const Batch batch = sampler.next();
    EXPECT_EQ(batch.rows_per_group, 2);
    ASSERT_EQ(batch.rows % 2, 0);
    EXPECT_LE(batch.rows, 4);
    for (std::int64_t r = 0; r < batch.rows; r += 2) {
      // Chosen then rejected of one prompt: same first 8 tokens, "ok" vs "no" after them.
      const auto row = [&](std::int64_t i, std::int64_t t) { return batch.input_ids[static_cast<std::size_t>(i * batch.length + t)]; };
      for (std::int64_t t = 0; t < 8; ++t) EXPECT_EQ(row(r, t), row(r + 1, t));
    }
  }
  EXPECT_EQ(sampler.state().rows_per_group, 2);
}

TEST_F(PreferenceTest, TruncationRules) {
  // Pair 1's rejected is the longest sequence by far.
  options_.train = file("train.jsonl", pair_line(7, " is what I would say") + "\n" + pair_line(8) + "\n");
  const Datasets whole = load();
  const std::vector<std::int32_t> longest = (*whole.train)[1].ids;
  std::size_t others = 0;
  for (std::size_t i : {0u, 2u, 3u}) others = std::max(others, (*whole.train)[i].ids.size());
  ASSERT_GT(longest.size(), others + 2);
  options_.max_seq_len = static_cast<std::int64_t>(longest.size()) - 2;
  options_.truncation = Truncation::keep_start;
  Datasets ds = load();
  EXPECT_EQ(ds.train_stats.truncated, 1);
  EXPECT_EQ((*ds.train)[1].ids, std::vector<std::int32_t>(longest.begin(), longest.end() - 2));  // its end cut
  options_.truncation = Truncation::keep_end;
  ds = load();
  EXPECT_EQ((*ds.train)[1].ids, std::vector<std::int32_t>(longest.begin() + 2, longest.end()));  // its start cut
  EXPECT_EQ(trained((*ds.train)[1]), "no 7 is what I would say</s>");  // the response whole
  options_.truncation = Truncation::drop;
  ds = load();
  EXPECT_EQ(ds.train_stats.too_long, 1);
  ASSERT_EQ(ds.train->size(), 2u);
  EXPECT_EQ((*ds.train)[0].record, 1);
  options_.truncation = Truncation::error;
  try {
    load();
    ADD_FAILURE() << "a too-long pair under data.truncation: error must fail";
  } catch (const FormatError& e) {
    const std::string want = "train.jsonl:1: " + std::to_string(longest.size()) + " tokens, more than data.max_seq_len " +
                             std::to_string(options_.max_seq_len) + " (data.truncation: error)";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST_F(PreferenceTest, IdenticalPairsAreDroppedAndCounted) {
  options_.train = file("train.jsonl", pair_line(1) + "\n" + R"({"prompt": "p", "chosen": "same", "rejected": "same"})" "\n");
  const Datasets ds = load();
  EXPECT_EQ(ds.train->size(), 2u);
  EXPECT_EQ(ds.train_stats.identical, 1);
}

TEST_F(PreferenceTest, MalformedRecordsNameTheRecordAndTheField) {
  EXPECT_NE(format_error(R"({"chosen": "a", "rejected": "b"})").find("bad.jsonl:2: missing key \"prompt\" (data.columns.prompt)"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"prompt": "p", "rejected": "b"})").find("bad.jsonl:2: missing key \"chosen\" (data.columns.chosen)"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"prompt": "p", "chosen": 3, "rejected": "b"})").find("bad.jsonl:2"), std::string::npos);
  EXPECT_NE(format_error(R"({"prompt": "p", "chosen": "a", "rejected": ""})").find("bad.jsonl:2: rejected is empty"), std::string::npos);
  EXPECT_NE(format_error(R"({"prompt": "", "chosen": "a", "rejected": "b"})").find("bad.jsonl:2: prompt is empty"), std::string::npos);
  const std::string number = format_error(R"({"prompt": 7, "chosen": "a", "rejected": "b"})");
  EXPECT_NE(number.find("bad.jsonl:2: key \"prompt\" expected a string or a list of messages, found"), std::string::npos) << number;
  const std::string object = format_error(R"({"prompt": [{"role": "user", "content": "q"}], "chosen": {"x": 1}, "rejected": "b"})");
  EXPECT_NE(object.find("bad.jsonl:2: key \"chosen\" expected a string or a list of messages, found"), std::string::npos) << object;
  EXPECT_NE(format_error(R"({"prompt": [{"role": "user"}], "chosen": "a", "rejected": "b"})").find("prompt[0]: missing key \"content\""),
            std::string::npos);
}

TEST_F(PreferenceTest, PackingIsRefused) {
  options_.train = file("train.jsonl", pair_line(0) + "\n");
  options_.packing = true;
  try {
    load();
    ADD_FAILURE() << "packing preference pairs must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.packing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctune::data::test
