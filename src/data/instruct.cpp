// Alpaca and text rendering; see instruct.h.
#include "data/instruct.h"

#include "data/records.h"

namespace ctune::data {

InstructRecord parse_instruct(const OrderedJson& record, const Columns& columns, const std::string& where) {
  InstructRecord rec;
  rec.instruction = *string_column(record, columns.instruction, "data.columns.instruction", where, true);
  rec.input = string_column(record, columns.input, "data.columns.input", where, false).value_or("");
  rec.output = *string_column(record, columns.output, "data.columns.output", where, true);
  return rec;
}

std::string alpaca_prompt(const InstructRecord& rec) {
  std::string p = "Below is an instruction that describes a task";
  if (!rec.input.empty()) p += ", paired with an input that provides further context";
  p += ". Write a response that appropriately completes the request.\n\n### Instruction:\n";
  p += rec.instruction;
  p += "\n\n";
  if (!rec.input.empty()) p += "### Input:\n" + rec.input + "\n\n";
  p += "### Response:\n";
  return p;
}

Rendered render_alpaca(const InstructRecord& rec, const ChatTokens& tokens) {
  Rendered r;
  if (tokens.add_bos && tokens.bos) r.special(*tokens.bos, false);
  r.text(alpaca_prompt(rec), false);
  r.trained_text(rec.output);
  if (tokens.eos) r.special(*tokens.eos, true);
  return r;
}

Conversation instruct_to_conversation(const InstructRecord& rec) {
  Conversation conv(2);
  conv[0].role = Role::user;
  conv[0].content = rec.input.empty() ? rec.instruction : rec.instruction + "\n\n" + rec.input;
  conv[1].role = Role::assistant;
  conv[1].content = rec.output;
  return conv;
}

Rendered render_text(const std::string& text, const ChatTokens& tokens, bool add_eos) {
  Rendered r;
  if (tokens.add_bos && tokens.bos) r.special(*tokens.bos, true);
  r.text(text, true);
  if (add_eos && tokens.eos) r.special(*tokens.eos, true);
  return r;
}

}  // namespace ctune::data
