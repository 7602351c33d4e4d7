// `ctune generate --chat`: a conversation as the model's chat template renders it with
// add_generation_prompt=True (docs/formats.md "Chat prompts"), tokenized as training tokenizes
// chat records, and the token that ends the assistant's turn.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/chat_format.h"
#include "data/chat_template.h"
#include "data/conversation.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {

class ChatPrompt {
 public:
  // `chat_format`: "auto" (the tokenizer's own chat template in `tokenizer_dir`, rendered by the
  // template engine; plain without one), "template", or a native format's name.
  ChatPrompt(const tok::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir, const std::string& chat_format);

  // The ids of `conversation` (ending with a user turn) followed by the assistant header.
  std::vector<std::int64_t> ids(const data::Conversation& conversation) const;
  // The ids of the tokens that end the assistant's turn besides eos (<|eot_id|>, <|im_end|>,
  // <end_of_turn>...).
  std::vector<std::int64_t> end_of_turn_ids() const;
  std::string format_name() const { return data::to_string(spec_.format); }

 private:
  const tok::Tokenizer& tokenizer_;
  data::ChatSpec spec_;
  data::ChatTokens tokens_;
  std::optional<data::ChatTemplate> template_;
};

}  // namespace ctune::cli
