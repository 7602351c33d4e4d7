// DataOptions: everything the data layer needs from the recipe's `data:` section (plus the
// run's seed and batch size), as one plain struct with documented defaults. The recipe loader
// fills it; the parse_* helpers turn the recipe's strings into the enums with a ConfigError
// that lists the allowed values, and validate() checks the cross-field rules (both an eval file
// and an eval fraction, ranges) before any file is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/json.h"

namespace ctune::data {

// How one record (JSON object) of the dataset becomes text.
enum class DataFormat {
  instruct,  // Alpaca columns: instruction, optional input, output
  chat,      // a list of {"role", "content"} messages
  text,      // one text column, every token trained
  // prompt, chosen, rejected: strings, or chat messages (TRL's conversational form). Each record
  // gives two examples, prompt + chosen then prompt + rejected, the prompt not trained
  // (docs/objectives.md#preference-data).
  preference,
  // prompt, completion, label (true: desirable): TRL's unpaired preference format, strings or
  // chat messages as preference's. Each record gives two examples, prompt + completion and the
  // KL row (its prompt + another record's completion, docs/objectives.md#kto), for KTO.
  unpaired_preference,
  // A prompt (a string, or chat messages rendered with the generation prompt) and any other
  // fields, for online RL (objective.name: grpo): nothing is trained from the record itself; the
  // fields reach the reward functions (docs/objectives.md#grpo).
  prompt,
};

// Examples one record gives: 2 for preference pairs and unpaired records (with its KL row), else 1 (they stay together: a group).
std::int64_t examples_per_record(DataFormat format);

// What happens to an example longer than data.max_seq_len (for a pair: either of its sequences).
enum class Truncation {
  keep_start,  // cut the end (a pair's responses lose their last tokens)
  keep_end,    // cut the start (a pair's prompt loses its first tokens, the responses stay whole)
  drop,        // leave it out and count it
  error,       // stop with a FormatError naming the record
};

// How a conversation is rendered. `automatic`: the tokenizer's own chat_template when it has
// one (model_template), else plain. The native renderers (llama3 ... plain) stay as choices.
enum class ChatFormat { automatic, model_template, llama3, chatml, qwen3, llama2, plain };

// How an instruct record is rendered. `automatic`: chat when the tokenizer has a chat
// template, else alpaca.
enum class InstructTemplate { automatic, alpaca, chat };

// What to do with a malformed record: stop with a FormatError, or skip it and count it.
enum class OnError { error, skip };

// Names of the JSON keys (`data.columns`), for datasets whose keys differ from the defaults.
struct Columns {
  std::string instruction = "instruction";
  std::string input = "input";  // optional in every record; empty or missing means no input
  std::string output = "output";
  std::string messages = "messages";
  std::string text = "text";
  std::string tools = "tools";  // chat: optional list of tool schemas, passed to the template
  std::string prompt = "prompt";      // preference
  std::string chosen = "chosen";      // preference: the preferred response
  std::string rejected = "rejected";  // preference: the other one
  std::string completion = "completion";  // unpaired_preference: the response
  std::string label = "label";            // unpaired_preference: true (desirable) or false
};

struct DataOptions {
  std::filesystem::path train;  // data.train: JSONL (one object per line) or a JSON array file
  std::filesystem::path eval;   // data.eval: same formats; empty = no eval file
  double eval_fraction = 0.0;   // data.eval_fraction: in (0, 1); 0 = none. Exclusive with eval.
  DataFormat format = DataFormat::instruct;
  Columns columns;
  ChatFormat chat_format = ChatFormat::automatic;
  InstructTemplate instruct_template = InstructTemplate::automatic;
  // false: only the response (instruct) or assistant turns (chat) are trained;
  // true: every token except padding (and the first token of each document).
  bool train_on_input = false;
  // false: special-token strings inside the data's text ("<|eot_id|>" in a message) are
  // tokenized as text, so data cannot forge turn boundaries; true: as their ids (Hugging Face's
  // behaviour). The chat format's own control tokens are unaffected.
  bool parse_special_in_content = false;
  std::int64_t max_seq_len = 1024;  // longer examples are truncated by `truncation`
  Truncation truncation = Truncation::keep_start;
  bool packing = false;             // concatenate examples into rows of exactly max_seq_len
  std::int64_t packing_window = 1024;  // documents per bin-packing window; 0: in order (batch.h)
  bool packing_split = false;       // a document may continue in the next row (batch.h)
  bool shuffle = true;              // shuffle the training examples each epoch (eval never is)
  OnError on_error = OnError::error;
  bool add_eos = true;  // text format: append the eos token to every document
  std::uint64_t seed = 0;          // shuffle order and eval_fraction split derive from it
  std::int64_t batch_size = 1;     // rows per batch
  // chat_format template: which of the tokenizer's templates ("" = default; "tool_use" for
  // records with tools when it has one), or a .jinja file; and extra template variables.
  std::string chat_template;
  OrderedJson template_kwargs = OrderedJson::object();
  // Directory of the tokenizer: its tokenizer_config.json (or chat_template.jinja) gives the
  // chat_template used by chat_format/instruct_template auto detection. Empty: no template.
  std::filesystem::path tokenizer_dir;
};

DataFormat parse_data_format(std::string_view value, std::string_view key = "data.format");
ChatFormat parse_chat_format(std::string_view value, std::string_view key = "data.chat_format");
InstructTemplate parse_instruct_template(std::string_view value, std::string_view key = "data.instruct_template");
OnError parse_on_error(std::string_view value, std::string_view key = "data.on_error");
Truncation parse_truncation(std::string_view value, std::string_view key = "data.truncation");

// Recipe spelling of each value ("instruct", "auto", "llama3", "skip", ...).
std::string to_string(DataFormat value);
std::string to_string(ChatFormat value);
std::string to_string(InstructTemplate value);
std::string to_string(OnError value);
std::string to_string(Truncation value);

// Cross-field and range checks; ConfigError naming the recipe key.
void validate(const DataOptions& options);

}  // namespace ctune::data
