// Preference records (data.format: preference) as two rendered examples, prompt + chosen and
// prompt + rejected, and unpaired ones (data.format: unpaired_preference) as one, prompt +
// completion, with the prompt untrained and the whole response (its end-of-turn or eos
// token included) trained: the response's log-probability given the prompt is what preference
// objectives compare. Two forms, as TRL accepts them (docs/objectives.md#preference-data):
//   standard:        {"prompt": "...", "chosen": "...", "rejected": "..."}: the texts concatenated,
//                    bos first when the tokenizer adds one, eos after each response unless it
//                    already ends with it (TRL's DPOTrainer adds it);
//   conversational:  "prompt" a list of messages, "chosen"/"rejected" a list of messages (usually
//                    one assistant turn) or a string (one assistant turn): rendered with the chat
//                    format of the run; the response is what the whole conversation renders
//                    after the prompt rendered with the generation prompt (TRL's rule). A chat
//                    format that renders the prompt differently inside the whole conversation is
//                    refused for that record.
#pragma once

#include <array>
#include <string>

#include "core/json.h"
#include "data/chat_format.h"
#include "data/chat_template.h"
#include "data/options.h"
#include "data/rendered.h"

namespace ctune::data {

// How conversations render for this run: the model's template when `model_template` is set,
// else `spec`'s native renderer.
struct ChatRendering {
  const ChatSpec& spec;
  const ChatTokens& tokens;
  const ChatTemplate* model_template = nullptr;
};

// {prompt + chosen, prompt + rejected}. FormatError naming `where` and the column for a missing
// or mistyped field, an empty prompt or response, or a prompt the chat format renders
// differently inside the whole conversation.
std::array<Rendered, 2> render_preference(const OrderedJson& record, const Columns& columns, const ChatRendering& chat,
                                          const std::string& where);

// data.format unpaired_preference (KTO, docs/objectives.md#unpaired-preference-data): a record
// with a prompt, one completion and a boolean label (TRL's unpaired preference format), in the
// same two forms as a preference record; prompt + completion rendered as prompt + chosen is.
struct Unpaired {
  Rendered rendered;
  bool desirable = false;  // the record's label
};
// FormatError naming `where` and the column for a missing or mistyped field (a label that is not
// true or false included), an empty prompt or completion, or a prompt the chat format renders
// differently inside the whole conversation.
Unpaired render_unpaired(const OrderedJson& record, const Columns& columns, const ChatRendering& chat, const std::string& where);

// data.format prompt (online RL, docs/objectives.md#grpo): the record's prompt alone, nothing
// trained: a string as [bos] text (TRL's standard form), a list of messages rendered with the
// run's chat format and its generation prompt, as a preference prompt is. FormatError naming
// `where` for a missing, empty or mistyped prompt.
Rendered render_prompt(const OrderedJson& record, const Columns& columns, const ChatRendering& chat, const std::string& where);

// `full` with every byte before `prompt_bytes` untrained and every byte from there trained.
// FormatError naming `where` when the boundary falls inside a special token.
Rendered split_at_prompt(const Rendered& full, std::size_t prompt_bytes, const std::string& where);

}  // namespace ctune::data
