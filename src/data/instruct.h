// Instruct (Alpaca-style) records: instruction, optional input, output. Rendered either with the
// Alpaca prompt for base models, or, when the model has a chat template, as one user turn and
// one assistant turn in its chat format. Also the text format (a plain document).
#pragma once

#include <string>

#include "core/json.h"
#include "data/chat_format.h"
#include "data/conversation.h"
#include "data/options.h"
#include "data/rendered.h"

namespace ctune::data {

struct InstructRecord {
  std::string instruction;
  std::string input;  // empty when the record has none
  std::string output;
};

// Reads the three columns; FormatError naming `where` and the data.columns key.
InstructRecord parse_instruct(const OrderedJson& record, const Columns& columns, const std::string& where);

// The Alpaca prompt, up to and including "### Response:\n":
//   Below is an instruction that describes a task[, paired with an input that provides further
//   context]. Write a response that appropriately completes the request.\n\n
//   ### Instruction:\n{instruction}\n\n[### Input:\n{input}\n\n]### Response:\n
std::string alpaca_prompt(const InstructRecord& rec);

// [bos when the tokenizer adds one] prompt (untrained) output eos (trained).
Rendered render_alpaca(const InstructRecord& rec, const ChatTokens& tokens);

// user: instruction, plus "\n\n" + input when there is one; assistant: output.
Conversation instruct_to_conversation(const InstructRecord& rec);

// The text format: [bos when the tokenizer adds one] text [eos when add_eos], all trained.
Rendered render_text(const std::string& text, const ChatTokens& tokens, bool add_eos);

}  // namespace ctune::data
