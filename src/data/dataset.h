// Loading the training and eval examples from the recipe's data options: read each file
// record by record, render it (RecordFormatter), tokenize and mask it (ExampleBuilder),
// truncate, drop examples left without a target, skip or refuse malformed records
// (data.on_error), and carve the eval split out of the training file when data.eval_fraction
// asks for it. The main entry point of the data layer for the trainer:
//
//   const auto tok = tok::load_tokenizer(model_dir);
//   data::Datasets ds = data::load_datasets(options, *tok);
//   data::Sampler train(ds.train, data::sampler_options(options, *tok));                   // sampler.h
//   data::BatchPlan eval = data::sequential_plan(*ds.eval, data::batch_options(options, *tok));  // batch.h
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/chat_format.h"
#include "data/example.h"
#include "data/options.h"
#include "tokenizer/tokenizer.h"

namespace ctune::data {

// What happened to one split's records. When the eval split comes from eval_fraction, the
// file-level counts (records, skipped) are reported in the train split's stats.
struct LoadStats {
  std::string file;
  std::int64_t records = 0;    // records read and rendered without error (a preference pair is one)
  std::int64_t skipped = 0;    // malformed records skipped (data.on_error: skip)
  std::int64_t dropped = 0;    // records left without a trained token after truncation
  std::int64_t truncated = 0;  // records with an example cut to data.max_seq_len
  std::int64_t too_long = 0;   // records left out as longer than data.max_seq_len (data.truncation: drop)
  std::int64_t identical = 0;  // preference pairs left out: chosen and rejected are the same tokens
  std::int64_t examples = 0;   // examples kept (two per preference pair, and per unpaired record with its KL row)
  std::int64_t tokens = 0;     // tokens of the kept examples
  std::int64_t target_tokens = 0;  // labels != -100 among them
  std::int64_t straddles = 0;      // mask boundaries that fell inside a token (see example_builder.h)
  std::vector<std::string> first_errors;  // messages of the first 10 skipped records
};

using Examples = std::shared_ptr<const std::vector<Example>>;

struct Datasets {
  Examples train;
  Examples eval;  // empty vector when there is no eval data
  // data.format prompt: every valid record of each split's file, indexed by Example::record (the
  // fields the reward functions read); null for the other formats. With eval_fraction both
  // splits index the training file's records.
  std::shared_ptr<const std::vector<OrderedJson>> train_records, eval_records;
  LoadStats train_stats, eval_stats;
  // What data.chat_format / data.instruct_template resolved to for this tokenizer.
  ChatSpec chat;
  InstructTemplate instruct_template = InstructTemplate::alpaca;
};

// validate()s the options, reads the chat template from options.tokenizer_dir, loads both
// splits. Errors: IoError (unreadable file), FormatError naming file:line (malformed record with
// on_error: error), ConfigError (no training examples, empty eval split, options that cannot
// work with this tokenizer), UnsupportedError (a chat template that is not reproduced).
Datasets load_datasets(const DataOptions& options, const tok::Tokenizer& tokenizer);

}  // namespace ctune::data
