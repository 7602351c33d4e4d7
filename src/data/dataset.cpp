// Dataset loading and the eval split; see dataset.h.
#include "data/dataset.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/progress.h"
#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/kl_rows.h"
#include "data/records.h"
#include "data/shuffle.h"

namespace ctune::data {
namespace {

// The examples built from one file (a preference record's two consecutive, with the same record
// index), and the valid-record indices of those that were dropped, truncated, too long
// (data.truncation: drop) or identical pairs, so that the counts can be split along with the
// examples.
struct Built {
  std::vector<Example> examples;
  std::vector<std::int64_t> dropped_records;
  std::vector<std::int64_t> truncated_records;
  std::vector<std::int64_t> too_long_records;
  std::vector<std::int64_t> identical_records;
  std::int64_t straddles = 0;
  std::vector<OrderedJson> records;  // data.format prompt: every valid record, by its index
};

// data.truncation on one built example that the builder did not cut (every rule but keep_start
// builds whole examples). Returns false when the example is to be dropped as too long.
bool truncate(BuildResult& b, const DataOptions& options, const std::string& where) {
  const auto max = static_cast<std::size_t>(options.max_seq_len);
  if (b.example.ids.size() <= max) return true;
  // A prompt's end is where generation starts (its generation prompt): keep_start cannot cut it,
  // so a prompt too long for it is left out and counted.
  if (options.format == DataFormat::prompt && options.truncation == Truncation::keep_start) return false;
  if (options.truncation == Truncation::keep_start) return true;
  switch (options.truncation) {
    case Truncation::error:
      throw FormatError(where + ": " + std::to_string(b.example.ids.size()) + " tokens, more than data.max_seq_len " +
                        std::to_string(options.max_seq_len) + " (data.truncation: error)");
    case Truncation::drop: return false;
    case Truncation::keep_end: {
      const auto cut = static_cast<std::ptrdiff_t>(b.example.ids.size() - max);
      b.example.ids.erase(b.example.ids.begin(), b.example.ids.begin() + cut);
      b.example.labels.erase(b.example.labels.begin(), b.example.labels.begin() + cut);
      b.truncated = true;
      return true;
    }
    case Truncation::keep_start: break;
  }
  return true;
}

// One record's examples: one, or a preference pair's two.
std::vector<BuildResult> build_record(const Record& rec, const DataOptions& options, const RecordFormatter& formatter,
                                      const ExampleBuilder& builder) {
  // The formatter names the record in its errors; the tokenizer's (a tokenizer.json regex past
  // Oniguruma's backtracking limit on this record's text) do not know it.
  auto build = [&](const Rendered& r) {
    try {
      return builder.build(r);
    } catch (const FormatError& e) {
      throw FormatError(rec.where + ": " + e.what());
    }
  };
  std::vector<BuildResult> out;
  if (options.format == DataFormat::preference) {
    for (const Rendered& r : formatter.render_pair(rec.value, rec.where)) out.push_back(build(r));
  } else if (options.format == DataFormat::unpaired_preference) {
    const Unpaired u = formatter.render_unpaired(rec.value, rec.where);
    out.push_back(build(u.rendered));
    out.back().example.desirable = u.desirable ? 1 : 0;  // its KL row comes with the split (with_kl_rows)
  } else {
    out.push_back(build(formatter.render(rec.value, rec.where)));
  }
  return out;
}

// Reads and builds every record of `path`; fills the file-level counts of `stats`.
Built build_file(const std::filesystem::path& path, const DataOptions& options, const RecordFormatter& formatter,
                 const ExampleBuilder& builder, LoadStats& stats) {
  Built out;
  stats.file = path.string();
  RecordReader reader(path);
  // Reading, rendering and tokenising are one pass: one stage, by bytes of the file.
  Stage stage(path.string(), static_cast<std::int64_t>(reader.file_bytes()), "bytes");
  std::int64_t tokens = 0;
  auto counts = [&] { return std::to_string(stats.records) + " records, " + std::to_string(tokens) + " tokens"; };
  Record rec;
  for (;;) {
    try {
      if (!reader.next(rec)) break;
      std::vector<BuildResult> built = build_record(rec, options, formatter, builder);
      bool fits = true;
      for (BuildResult& b : built) fits = truncate(b, options, rec.where) && fits;
      const std::int64_t index = stats.records++;
      if (options.format == DataFormat::prompt) out.records.push_back(rec.value);
      bool truncated = false, targets = true;
      for (const BuildResult& b : built) {
        tokens += static_cast<std::int64_t>(b.example.ids.size());
        out.straddles += b.straddles;
        truncated = truncated || b.truncated;
        targets = targets && b.has_target();
      }
      stage.update(static_cast<std::int64_t>(reader.bytes_read()), 0, counts);
      if (!fits) {
        out.too_long_records.push_back(index);
        continue;
      }
      if (truncated) out.truncated_records.push_back(index);
      if (!targets && options.format != DataFormat::prompt) {  // a prompt trains nothing itself
        out.dropped_records.push_back(index);
        continue;
      }
      // A pair whose responses are the same tokens teaches nothing.
      if (built.size() == 2 && built[0].example.ids == built[1].example.ids) {
        out.identical_records.push_back(index);
        continue;
      }
      for (BuildResult& b : built) {
        b.example.record = index;
        out.examples.push_back(std::move(b.example));
      }
    } catch (const FormatError& e) {
      if (options.on_error == OnError::error) throw;
      ++stats.skipped;
      if (stats.first_errors.size() < 10) stats.first_errors.emplace_back(e.what());
    }
  }
  stage.finish(path.string() + ": " + counts() + (stats.skipped ? ", " + std::to_string(stats.skipped) + " skipped" : "") +
               " (" + format_bytes(reader.file_bytes()) + ") in " + format_duration(stage.seconds()));
  return out;
}

// Moves the examples of one split out of `built` and counts them into `stats`: all of them when
// `in_eval` is null, else those whose record's in_eval flag equals `want_eval`. Unpaired records
// get their KL rows here, built within the split (kl_rows.h).
std::vector<Example> take(Built& built, LoadStats& stats, const std::vector<char>* in_eval, bool want_eval, const DataOptions& options) {
  auto selected = [&](std::int64_t record) {
    return !in_eval || (*in_eval)[static_cast<std::size_t>(record)] == static_cast<char>(want_eval);
  };
  std::vector<Example> out;
  for (Example& e : built.examples) {
    if (selected(e.record)) out.push_back(std::move(e));
  }
  if (options.format == DataFormat::unpaired_preference)
    out = with_kl_rows(std::move(out), options.batch_size, options.max_seq_len, options.truncation);
  for (const Example& e : out) {
    stats.tokens += static_cast<std::int64_t>(e.ids.size());
    stats.target_tokens += std::count_if(e.labels.begin(), e.labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; });
  }
  stats.examples = static_cast<std::int64_t>(out.size());
  stats.dropped = std::count_if(built.dropped_records.begin(), built.dropped_records.end(), selected);
  stats.truncated = std::count_if(built.truncated_records.begin(), built.truncated_records.end(), selected);
  stats.too_long = std::count_if(built.too_long_records.begin(), built.too_long_records.end(), selected);
  stats.identical = std::count_if(built.identical_records.begin(), built.identical_records.end(), selected);
  return out;
}

std::string summary(const LoadStats& s, const DataOptions& o) {
  std::string msg = std::to_string(s.records + s.skipped) + " records";
  if (s.skipped) msg += ", " + std::to_string(s.skipped) + " skipped as malformed";
  if (s.dropped)
    msg += ", " + std::to_string(s.dropped) + " without a trained token after truncation to " +
           std::to_string(o.max_seq_len) + " tokens";
  if (s.too_long) msg += ", " + std::to_string(s.too_long) + " longer than " + std::to_string(o.max_seq_len) + " tokens (data.truncation: drop)";
  if (s.identical) msg += ", " + std::to_string(s.identical) + " pairs whose chosen and rejected are the same tokens";
  return msg;
}

}  // namespace

Datasets load_datasets(const DataOptions& options, const tok::Tokenizer& tokenizer) {
  validate(options);
  const std::optional<std::string> chat_template = read_chat_template(options.tokenizer_dir);
  const RecordFormatter formatter(options, tokenizer, chat_template);
  // The builder cuts the end itself (keep_start); every other rule sees whole examples.
  const bool builder_cuts = options.truncation == Truncation::keep_start && options.format != DataFormat::prompt;
  const ExampleBuilder builder(tokenizer, options.train_on_input, builder_cuts ? options.max_seq_len : 0,
                               options.parse_special_in_content);

  Datasets ds;
  ds.chat = formatter.chat_spec();
  ds.instruct_template = formatter.instruct_template();

  Built train = build_file(options.train, options, formatter, builder, ds.train_stats);
  auto records = [](Built& b) {
    return b.records.empty() ? nullptr : std::make_shared<const std::vector<OrderedJson>>(std::move(b.records));
  };
  ds.train_records = records(train);
  ds.eval_records = options.eval_fraction > 0.0 ? ds.train_records : nullptr;
  if (options.eval_fraction > 0.0) {
    const std::int64_t n = ds.train_stats.records;
    const auto n_eval = static_cast<std::int64_t>(std::llround(options.eval_fraction * static_cast<double>(n)));
    if (n_eval == 0)
      throw ConfigError("data.eval_fraction " + std::to_string(options.eval_fraction) + " of " + std::to_string(n) +
                        " records in " + options.train.string() + " gives an empty eval split");
    if (n_eval >= n)
      throw ConfigError("data.eval_fraction " + std::to_string(options.eval_fraction) + " of " + std::to_string(n) +
                        " records in " + options.train.string() + " leaves no training records");
    // Membership from a seeded permutation; both splits keep file order.
    std::vector<char> in_eval(static_cast<std::size_t>(n), 0);
    const std::vector<std::int64_t> perm = permutation(n, options.seed, Stream::eval_split, 0);
    for (std::int64_t k = 0; k < n_eval; ++k) in_eval[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])] = 1;
    ds.eval_stats.file = ds.train_stats.file;
    ds.eval_stats.records = n_eval;
    ds.train_stats.records = n - n_eval;
    ds.eval = std::make_shared<const std::vector<Example>>(take(train, ds.eval_stats, &in_eval, true, options));
    ds.train = std::make_shared<const std::vector<Example>>(take(train, ds.train_stats, &in_eval, false, options));
    if (ds.eval->empty())
      throw ConfigError("data.eval_fraction: the eval split of " + options.train.string() +
                        " is empty: " + summary(ds.eval_stats, options));
  } else {
    ds.train = std::make_shared<const std::vector<Example>>(take(train, ds.train_stats, nullptr, false, options));
    if (!options.eval.empty() && options.eval == options.train) {
      // Evaluating on the training file (`ctune eval --data FILE` names it as both): the same
      // examples, built once.
      ds.eval = ds.train;
      ds.eval_records = ds.train_records;
      ds.eval_stats = ds.train_stats;
      ds.eval_stats.straddles = train.straddles;
    } else if (!options.eval.empty()) {
      Built eval = build_file(options.eval, options, formatter, builder, ds.eval_stats);
      ds.eval_records = records(eval);
      ds.eval = std::make_shared<const std::vector<Example>>(take(eval, ds.eval_stats, nullptr, false, options));
      ds.eval_stats.straddles = eval.straddles;
      if (ds.eval->empty())
        throw ConfigError(options.eval.string() + ": no eval examples (" + summary(ds.eval_stats, options) + ")");
    } else {
      ds.eval = std::make_shared<const std::vector<Example>>();
    }
  }
  ds.train_stats.straddles = train.straddles;
  if (ds.train->empty())
    throw ConfigError(options.train.string() + ": no training examples (" + summary(ds.train_stats, options) + ")");
  return ds;
}

}  // namespace ctune::data
