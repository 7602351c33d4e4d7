#include "cli/chat_prompt.h"

#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/options.h"

namespace ctune::cli {

ChatPrompt::ChatPrompt(const tok::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir, const std::string& chat_format)
    : tokenizer_(tokenizer),
      spec_(data::resolve_chat_format(data::parse_chat_format(chat_format, "--chat-format"), data::read_chat_template(tokenizer_dir))),
      tokens_(data::chat_tokens(tokenizer)) {
  if (spec_.format == data::ChatFormat::model_template)
    template_.emplace(data::read_chat_templates(tokenizer_dir), "", tokenizer_dir, tokenizer, OrderedJson::object());
}

std::vector<std::int64_t> ChatPrompt::ids(const data::Conversation& conversation) const {
  if (template_) {
    OrderedJson messages = OrderedJson::array();
    for (const data::Message& m : conversation) messages.push_back({{"role", data::role_name(m.role)}, {"content", m.content}});
    // The template's text as transformers tokenizes it: special tokens parsed, no bos added.
    const auto ids = tokenizer_.encode(template_->render(messages, nullptr, /*add_generation_prompt=*/true),
                                       /*add_special=*/false, /*special_as_text=*/false);
    return {ids.begin(), ids.end()};
  }
  auto rendered = data::render_chat(conversation, spec_, tokens_, "the chat");
  data::append_generation_prompt(rendered, spec_, conversation.empty());
  // Special pieces (headers, bos) are looked up as tokens, the text is encoded, as for training.
  const auto built = data::ExampleBuilder(tokenizer_, /*train_on_input=*/true, /*max_seq_len=*/0).build(rendered);
  return {built.example.ids.begin(), built.example.ids.end()};
}

std::vector<std::int64_t> ChatPrompt::end_of_turn_ids() const {
  std::vector<std::string> tokens;
  if (template_) tokens = template_->end_tokens();
  else if (const auto token = data::end_of_turn_token(spec_)) tokens.push_back(*token);
  std::vector<std::int64_t> out;
  for (const std::string& t : tokens)
    if (const auto id = tokenizer_.token_to_id(t)) out.push_back(*id);
  return out;
}

}  // namespace ctune::cli
