#include "cli/chat_prompt.h"

#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/options.h"

namespace ctune::cli {

ChatPrompt::ChatPrompt(const tok::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir, const std::string& chat_format)
    : tokenizer_(tokenizer),
      spec_(data::resolve_chat_format(data::parse_chat_format(chat_format, "--chat-format"), data::read_chat_template(tokenizer_dir))),
      tokens_(data::chat_tokens(tokenizer)) {}

std::vector<std::int64_t> ChatPrompt::ids(const data::Conversation& conversation) const {
  auto rendered = data::render_chat(conversation, spec_, tokens_, "the chat");
  data::append_generation_prompt(rendered, spec_, conversation.empty());
  // Special pieces (headers, bos) are looked up as tokens, the text is encoded, as for training.
  const auto built = data::ExampleBuilder(tokenizer_, /*train_on_input=*/true, /*max_seq_len=*/0).build(rendered);
  return {built.example.ids.begin(), built.example.ids.end()};
}

std::optional<std::int64_t> ChatPrompt::end_of_turn_id() const {
  const auto token = data::end_of_turn_token(spec_);
  if (!token) return std::nullopt;
  const auto id = tokenizer_.token_to_id(*token);
  if (!id) return std::nullopt;
  return *id;
}

}  // namespace ctune::cli
