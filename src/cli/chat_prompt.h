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
#include "data/conversation.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {

class ChatPrompt {
 public:
  // `chat_format`: "auto" (from the tokenizer's chat template in `tokenizer_dir`) or a family
  // name; UnsupportedError for a template no renderer reproduces.
  ChatPrompt(const tok::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir, const std::string& chat_format);

  // The ids of `conversation` (ending with a user turn) followed by the assistant header.
  std::vector<std::int64_t> ids(const data::Conversation& conversation) const;
  // The end-of-turn token's id (<|eot_id|>, <|im_end|>) when the format has one besides eos.
  std::optional<std::int64_t> end_of_turn_id() const;
  std::string format_name() const { return data::to_string(spec_.format); }

 private:
  const tok::Tokenizer& tokenizer_;
  data::ChatSpec spec_;
  data::ChatTokens tokens_;
};

}  // namespace ctune::cli
