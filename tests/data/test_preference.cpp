// Preference records (data.format: preference) on the byte-level tokenizer (<s> 256, </s> 257,
// add_bos): the standard and conversational forms give prompt + chosen then prompt + rejected
// with only the response trained, pairs stay together through the eval split, shuffling and
// batching, data.truncation's four rules, identical pairs dropped, and every malformed record
// refused with one error naming the record and the field. Unpaired records (data.format:
// unpaired_preference, KTO): both forms give prompt + completion with the label carried to the
// batch; each record's KL row is its prompt with the previous record's completion in blocks of
// the batch size, rotated as TRL's KTOTrainer rotates them, within each split; malformed records
// are refused (or skipped) with one line naming the record and the field, expected vs found.
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
  // The FormatError of `line`, the second record of a file whose first is `first`.
  std::string format_error(const std::string& line, const std::string& first = pair_line(0)) {
    options_.train = file("bad.jsonl", first + "\n" + line + "\n");
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
  for (DataFormat format : {DataFormat::preference, DataFormat::unpaired_preference}) {
    options_.format = format;
    try {
      load();
      ADD_FAILURE() << "packing " << to_string(format) << " records must be refused";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data.packing"), std::string::npos) << e.what();
    }
  }
}


std::string record(int k, bool label) {
  return R"({"prompt": "Say )" + std::to_string(k) + R"(: ", "completion": "w)" + std::string(static_cast<std::size_t>(k % 3 + 1), 'o') +
         std::to_string(k) + R"(", "label": )" + (label ? "true" : "false") + "}";
}

class UnpairedTest : public PreferenceTest {
 protected:
  void SetUp() override {
    PreferenceTest::SetUp();
    options_.format = DataFormat::unpaired_preference;
    options_.shuffle = false;
  }
  // The untrained and the trained tokens of an example, decoded (eos as </s>).
  static std::pair<std::string, std::string> parts(const Example& e) {
    std::vector<std::int32_t> prompt, completion;
    for (std::size_t t = 0; t < e.ids.size(); ++t) (e.labels[t] == kIgnoreIndex ? prompt : completion).push_back(e.ids[t]);
    return {byte_tokenizer().decode(prompt, false), byte_tokenizer().decode(completion, false)};
  }
  std::string format_error(const std::string& line) { return PreferenceTest::format_error(line, record(0, true)); }
};

TEST_F(UnpairedTest, EachRecordIsItsCompletionThenItsKlRowRotatedWithinBlocksOfTheBatchSize) {
  std::string lines;
  for (int k = 0; k < 5; ++k) lines += record(k, k % 2 == 0) + "\n";
  options_.train = file("train.jsonl", lines);
  options_.batch_size = 3;  // blocks: records 0-2, then 3-4
  const Datasets ds = load();
  ASSERT_EQ(ds.train->size(), 10u);
  EXPECT_EQ(ds.train_stats.records, 5);
  EXPECT_EQ(ds.train_stats.examples, 10);
  const auto& ex = *ds.train;
  const std::vector<int> kl_source = {2, 0, 1, 4, 3};  // TRL: [y_last] + y[:-1] within each block
  for (int k = 0; k < 5; ++k) {
    const Example& own = ex[static_cast<std::size_t>(2 * k)];
    const Example& kl = ex[static_cast<std::size_t>(2 * k + 1)];
    const std::string prompt = "<s>Say " + std::to_string(k) + ": ";
    EXPECT_EQ(parts(own).first, prompt);
    EXPECT_EQ(parts(own).second, "w" + std::string(static_cast<std::size_t>(k % 3 + 1), 'o') + std::to_string(k) + "</s>");
    EXPECT_EQ(parts(kl).first, prompt);
    EXPECT_EQ(parts(kl).second, parts(ex[static_cast<std::size_t>(2 * kl_source[static_cast<std::size_t>(k)])]).second);
    EXPECT_EQ(own.desirable, k % 2 == 0 ? 1 : 0);
    EXPECT_EQ(kl.desirable, -1);
    EXPECT_EQ(own.record, k);
    EXPECT_EQ(kl.record, k);
  }
}

TEST_F(UnpairedTest, ConversationalFormRendersTheCompletionAfterTheGenerationPrompt) {
  options_.chat_format = ChatFormat::plain;  // the byte tokenizer has no chat template
  options_.train = file("train.jsonl", R"({"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Hello"}], "label": true})"
                                       "\n"
                                       R"({"prompt": [{"role": "user", "content": "Yo"}], "completion": "Go away", "label": false})"
                                       "\n");
  options_.batch_size = 2;
  const Datasets ds = load();
  ASSERT_EQ(ds.train->size(), 4u);
  EXPECT_EQ(parts((*ds.train)[0]).second, " Hello</s>");
  EXPECT_EQ(parts((*ds.train)[2]).second, " Go away</s>");
  EXPECT_EQ(parts((*ds.train)[1]).second, " Go away</s>");  // record 0's KL row: record 1's completion
  EXPECT_EQ(parts((*ds.train)[1]).first, parts((*ds.train)[0]).first);
  EXPECT_EQ((*ds.train)[0].desirable, 1);
  EXPECT_EQ((*ds.train)[2].desirable, 0);
}

TEST_F(UnpairedTest, BatchesAreBlocksAndCarryTheLabels) {
  std::string lines;
  for (int k = 0; k < 7; ++k) lines += record(k, k % 3 != 0) + "\n";
  options_.train = file("train.jsonl", lines);
  options_.eval_fraction = 0.3;
  options_.seed = 5;
  options_.batch_size = 2;
  const Datasets ds = load();
  // Each split pairs its own records: a KL row's completion is one of its split's.
  for (const Examples* split : {&ds.train, &ds.eval}) {
    ASSERT_EQ((*split)->size() % 2, 0u);
    for (std::size_t i = 0; i < (*split)->size(); i += 2) {
      EXPECT_EQ((**split)[i].record, (**split)[i + 1].record);
      bool found = false;
      for (std::size_t j = 0; j < (*split)->size(); j += 2) found = found || parts((**split)[j]).second == parts((**split)[i + 1]).second;
      EXPECT_TRUE(found) << "KL row " << i + 1;
    }
  }
  Sampler sampler(ds.train, sampler_options(options_, byte_tokenizer()));
  const Batch batch = sampler.next();
  ASSERT_EQ(batch.rows, 4);
  EXPECT_EQ(batch.rows_per_group, 2);
  ASSERT_EQ(batch.desirable.size(), 4u);
  for (std::int64_t r = 0; r < batch.rows; ++r) {
    const Example& e = (*ds.train)[static_cast<std::size_t>(batch.examples[static_cast<std::size_t>(r)])];
    EXPECT_EQ(batch.desirable[static_cast<std::size_t>(r)], e.desirable);
    EXPECT_EQ(r % 2 == 0, e.desirable >= 0) << r;
  }
  const Batch half = batch.slice_rows(2, 4);
  EXPECT_EQ(half.desirable, std::vector<std::int8_t>(batch.desirable.begin() + 2, batch.desirable.end()));
}

TEST_F(UnpairedTest, KlRowsAreCutToTheLongestSequence) {
  // Record 1's completion is long; record 0's KL row (prompt 0 + completion 1) is cut at its end,
  // or at its start under keep_end.
  options_.train = file("train.jsonl", record(0, true) + "\n" +
                                           R"({"prompt": "Q", "completion": "a long, long completion", "label": false})" "\n");
  options_.batch_size = 2;
  const Datasets whole = load();
  const Example full_kl = (*whole.train)[1];
  options_.max_seq_len = static_cast<std::int64_t>(full_kl.ids.size()) - 3;
  options_.truncation = Truncation::keep_start;
  Datasets ds = load();
  EXPECT_EQ((*ds.train)[1].ids, std::vector<std::int32_t>(full_kl.ids.begin(), full_kl.ids.end() - 3));
  options_.truncation = Truncation::keep_end;
  ds = load();
  EXPECT_EQ((*ds.train)[1].ids, std::vector<std::int32_t>(full_kl.ids.begin() + 3, full_kl.ids.end()));
}

TEST_F(UnpairedTest, MalformedRecordsNameTheRecordAndTheField) {
  const std::string missing = format_error(R"({"prompt": "p", "completion": "a"})");
  EXPECT_NE(missing.find("bad.jsonl:2: missing key \"label\" (data.columns.label)"), std::string::npos) << missing;
  const std::string text = format_error(R"({"prompt": "p", "completion": "a", "label": "yes"})");
  EXPECT_NE(text.find("bad.jsonl:2: key \"label\" expected true or false, found a string \"yes\" (data.columns.label)"), std::string::npos) << text;
  const std::string number = format_error(R"({"prompt": "p", "completion": "a", "label": 1})");
  EXPECT_NE(number.find("bad.jsonl:2: key \"label\" expected true or false, found an integer 1"), std::string::npos) << number;
  const std::string no_completion = format_error(R"({"prompt": "p", "label": true})");
  EXPECT_NE(no_completion.find("bad.jsonl:2: missing key \"completion\" (data.columns.completion)"), std::string::npos) << no_completion;
  EXPECT_NE(format_error(R"({"prompt": "p", "completion": "", "label": true})").find("bad.jsonl:2: completion is empty"), std::string::npos);
  EXPECT_NE(format_error(R"({"prompt": "", "completion": "a", "label": true})").find("bad.jsonl:2: prompt is empty"), std::string::npos);
  const std::string object = format_error(R"({"prompt": [{"role": "user", "content": "q"}], "completion": {"x": 1}, "label": true})");
  EXPECT_NE(object.find("bad.jsonl:2: key \"completion\" expected a string or a list of messages, found"), std::string::npos) << object;
}

TEST_F(UnpairedTest, MalformedRecordsAreSkippedAndCountedUnderOnErrorSkip) {
  options_.on_error = OnError::skip;
  options_.batch_size = 2;
  options_.train = file("train.jsonl", record(0, true) + "\n" + R"({"prompt": "p", "completion": "a", "label": "no"})" "\n" +
                                           record(2, false) + "\n");
  const Datasets ds = load();
  EXPECT_EQ(ds.train_stats.skipped, 1);
  EXPECT_EQ(ds.train->size(), 4u);
  ASSERT_EQ(ds.train_stats.first_errors.size(), 1u);
  EXPECT_NE(ds.train_stats.first_errors[0].find("train.jsonl:2: key \"label\" expected true or false"), std::string::npos);
}

}  // namespace
}  // namespace ctune::data::test
