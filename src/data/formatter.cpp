// Record rendering per data.format and the resolution of the auto settings; see formatter.h.
#include "data/formatter.h"

#include "core/error.h"
#include "data/conversation.h"
#include "data/instruct.h"
#include "data/preference.h"
#include "data/records.h"

namespace ctune::data {

ChatTokens chat_tokens(const tok::Tokenizer& tokenizer) {
  ChatTokens t;
  const tok::SpecialTokens& s = tokenizer.special();
  if (s.bos) t.bos = tokenizer.id_to_token(*s.bos);
  if (s.eos) t.eos = tokenizer.id_to_token(*s.eos);
  t.add_bos = s.add_bos && s.bos;
  return t;
}

RecordFormatter::RecordFormatter(const DataOptions& options, const tok::Tokenizer& tokenizer,
                                 const std::optional<std::string>& chat_template)
    : format_(options.format), columns_(options.columns), add_eos_(options.add_eos), tokens_(chat_tokens(tokenizer)),
      train_on_input_(options.train_on_input) {
  instruct_ = options.instruct_template;
  if (instruct_ == InstructTemplate::automatic)
    instruct_ = chat_template && !chat_template->empty() ? InstructTemplate::chat : InstructTemplate::alpaca;
  // Preference records may be conversations: the chat format is resolved for them too.
  const bool uses_chat = format_ == DataFormat::chat || format_ == DataFormat::preference || format_ == DataFormat::prompt ||
                         format_ == DataFormat::unpaired_preference ||
                         (format_ == DataFormat::instruct && instruct_ == InstructTemplate::chat);
  // A chosen template (data.chat_template) is what auto renders, even when the tokenizer has none.
  const bool chosen = options.chat_format == ChatFormat::automatic && !options.chat_template.empty();
  if (uses_chat) chat_ = resolve_chat_format(chosen ? ChatFormat::model_template : options.chat_format, chat_template);
  if (uses_chat && chat_.format == ChatFormat::model_template)
    template_.emplace(read_chat_templates(options.tokenizer_dir), options.chat_template, options.tokenizer_dir, tokenizer,
                      options.template_kwargs);

  // Formats that end a response with eos cannot teach the model to stop without one.
  const bool needs_eos = (format_ == DataFormat::instruct && instruct_ == InstructTemplate::alpaca) ||
                         (uses_chat && (chat_.format == ChatFormat::plain || chat_.format == ChatFormat::llama2)) ||
                         (format_ == DataFormat::text && add_eos_) || format_ == DataFormat::preference ||
                         format_ == DataFormat::unpaired_preference;
  if (needs_eos && !tokens_.eos)
    throw ConfigError("the tokenizer has no eos token, which data.format " + to_string(format_) +
                      (uses_chat ? " with chat format " + to_string(chat_.format) : std::string()) +
                      " needs (set eos_token in tokenizer_config.json" +
                      (format_ == DataFormat::text ? ", or data.add_eos: false)" : ")"));
}

Rendered RecordFormatter::render(const OrderedJson& record, const std::string& where) const {
  switch (format_) {
    case DataFormat::text:
      return render_text(*string_column(record, columns_.text, "data.columns.text", where, true), tokens_, add_eos_);
    case DataFormat::instruct: {
      const InstructRecord rec = parse_instruct(record, columns_, where);
      if (instruct_ == InstructTemplate::alpaca) return render_alpaca(rec, tokens_);
      if (template_) {
        ChatRecord chat;
        chat.messages = OrderedJson::array();
        for (const Message& m : instruct_to_conversation(rec)) {
          chat.messages.push_back({{"role", role_name(m.role)}, {"content", m.content}});
          chat.trainable.push_back(true);
        }
        chat.tools = nullptr;
        return template_->render_training(chat, train_on_input_, where);
      }
      return render_chat(instruct_to_conversation(rec), chat_, tokens_, where);
    }
    case DataFormat::chat:
      if (template_)
        return template_->render_training(parse_chat_record(record, columns_.messages, columns_.tools, where),
                                          train_on_input_, where);
      return render_chat(parse_conversation(record, columns_.messages, where), chat_, tokens_, where);
    case DataFormat::prompt:
      return render_prompt(record, columns_, ChatRendering{chat_, tokens_, template_ ? &*template_ : nullptr}, where);
    case DataFormat::preference:
      throw std::logic_error("RecordFormatter::render: a preference record renders as a pair (render_pair)");
    case DataFormat::unpaired_preference:
      throw std::logic_error("RecordFormatter::render: an unpaired record renders with its label (render_unpaired)");
  }
  throw ConfigError("data.format: unknown value");
}

std::array<Rendered, 2> RecordFormatter::render_pair(const OrderedJson& record, const std::string& where) const {
  return render_preference(record, columns_, ChatRendering{chat_, tokens_, template_ ? &*template_ : nullptr}, where);
}

Unpaired RecordFormatter::render_unpaired(const OrderedJson& record, const std::string& where) const {
  return data::render_unpaired(record, columns_, ChatRendering{chat_, tokens_, template_ ? &*template_ : nullptr}, where);
}

}  // namespace ctune::data
