// String <-> enum conversion for the data options and their validation. One table per enum,
// so the parser, the printer and the "expected one of" message cannot disagree.
#include "data/options.h"

#include <cmath>
#include <utility>

#include "core/error.h"

namespace ctune::data {
namespace {

template <typename E, std::size_t N>
E parse_enum(std::string_view value, std::string_view key, const std::pair<const char*, E> (&table)[N]) {
  std::string allowed;
  for (const auto& [name, e] : table) {
    if (value == name) return e;
    allowed += (allowed.empty() ? "" : " | ") + std::string(name);
  }
  throw ConfigError(std::string(key) + ": unknown value \"" + std::string(value) + "\" (expected " + allowed +
                    ")");
}

template <typename E, std::size_t N>
std::string enum_name(E value, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, e] : table)
    if (e == value) return name;
  return "?";
}

const std::pair<const char*, DataFormat> kFormats[] = {
    {"instruct", DataFormat::instruct}, {"chat", DataFormat::chat}, {"text", DataFormat::text},
    {"preference", DataFormat::preference}, {"unpaired_preference", DataFormat::unpaired_preference},
    {"prompt", DataFormat::prompt}};
const std::pair<const char*, ChatFormat> kChatFormats[] = {
    {"auto", ChatFormat::automatic}, {"template", ChatFormat::model_template}, {"llama3", ChatFormat::llama3}, {"chatml", ChatFormat::chatml},
    {"qwen3", ChatFormat::qwen3},    {"llama2", ChatFormat::llama2}, {"plain", ChatFormat::plain}};
const std::pair<const char*, InstructTemplate> kInstructTemplates[] = {
    {"auto", InstructTemplate::automatic}, {"alpaca", InstructTemplate::alpaca}, {"chat", InstructTemplate::chat}};
const std::pair<const char*, OnError> kOnError[] = {{"error", OnError::error}, {"skip", OnError::skip}};
const std::pair<const char*, Truncation> kTruncations[] = {
    {"keep_start", Truncation::keep_start}, {"keep_end", Truncation::keep_end}, {"drop", Truncation::drop}, {"error", Truncation::error}};

}  // namespace

DataFormat parse_data_format(std::string_view value, std::string_view key) {
  return parse_enum(value, key, kFormats);
}
ChatFormat parse_chat_format(std::string_view value, std::string_view key) {
  return parse_enum(value, key, kChatFormats);
}
InstructTemplate parse_instruct_template(std::string_view value, std::string_view key) {
  return parse_enum(value, key, kInstructTemplates);
}
OnError parse_on_error(std::string_view value, std::string_view key) {
  return parse_enum(value, key, kOnError);
}

Truncation parse_truncation(std::string_view value, std::string_view key) { return parse_enum(value, key, kTruncations); }

std::int64_t examples_per_record(DataFormat format) {
  return format == DataFormat::preference || format == DataFormat::unpaired_preference ? 2 : 1;
}

std::string to_string(DataFormat value) { return enum_name(value, kFormats); }
std::string to_string(ChatFormat value) { return enum_name(value, kChatFormats); }
std::string to_string(InstructTemplate value) { return enum_name(value, kInstructTemplates); }
std::string to_string(OnError value) { return enum_name(value, kOnError); }
std::string to_string(Truncation value) { return enum_name(value, kTruncations); }

void validate(const DataOptions& o) {
  if (o.train.empty()) throw ConfigError("data.train: missing (the training file is required)");
  if (!o.eval.empty() && o.eval_fraction != 0.0)
    throw ConfigError("data.eval and data.eval_fraction are both set (" + o.eval.string() + ", " +
                      std::to_string(o.eval_fraction) + "): give one of them");
  if (!std::isfinite(o.eval_fraction) || o.eval_fraction < 0.0 || o.eval_fraction >= 1.0)
    throw ConfigError("data.eval_fraction: expected a number in (0, 1) or 0 for none, found " +
                      std::to_string(o.eval_fraction));
  if (o.max_seq_len < 2)
    throw ConfigError("data.max_seq_len: expected at least 2, found " + std::to_string(o.max_seq_len));
  if (o.format == DataFormat::preference && o.packing)
    throw ConfigError("data.packing: preference pairs are scored as whole sequences, one per row; set data.packing: false");
  if (o.format == DataFormat::unpaired_preference && o.packing)
    throw ConfigError("data.packing: unpaired completions are scored as whole sequences, one per row; set data.packing: false");
  if (o.format == DataFormat::prompt && o.packing)
    throw ConfigError("data.packing: prompts are generated from one per row; set data.packing: false");
  if (o.batch_size < 1)
    throw ConfigError("batch_size: expected at least 1, found " + std::to_string(o.batch_size));
  const std::pair<const char*, const std::string*> columns[] = {
      {"instruction", &o.columns.instruction}, {"input", &o.columns.input},   {"output", &o.columns.output},
      {"messages", &o.columns.messages},       {"text", &o.columns.text},     {"tools", &o.columns.tools},
      {"prompt", &o.columns.prompt},           {"chosen", &o.columns.chosen}, {"rejected", &o.columns.rejected},
      {"completion", &o.columns.completion},   {"label", &o.columns.label}};
  for (const auto& [name, value] : columns)
    if (value->empty()) throw ConfigError(std::string("data.columns.") + name + ": empty column name");
}

}  // namespace ctune::data
