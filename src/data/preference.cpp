// Preference records rendered as two examples; see preference.h.
#include "data/preference.h"

#include "core/error.h"
#include "data/conversation.h"
#include "data/records.h"

namespace ctune::data {
namespace {

OrderedJson to_json(const Conversation& conv) {
  OrderedJson out = OrderedJson::array();
  for (const Message& m : conv) out.push_back({{"role", role_name(m.role)}, {"content", m.content}});
  return out;
}

// The rendered conversation, with the generation prompt after it when asked.
Rendered render_conversation(const Conversation& conv, bool generation_prompt, const ChatRendering& chat, const std::string& where) {
  if (chat.model_template) {
    Rendered r;
    r.text(chat.model_template->render(to_json(conv), nullptr, generation_prompt), false);
    r.set_parse_special(true);  // as transformers tokenizes a template's output
    return r;
  }
  Rendered r = render_chat(conv, chat.spec, chat.tokens, where);
  if (generation_prompt) append_generation_prompt(r, chat.spec, conv.empty());
  return r;
}

// The standard form: [bos] prompt | response [eos].
Rendered standard(const std::string& prompt, const std::string& response, const ChatTokens& tokens) {
  Rendered r;
  if (tokens.add_bos && tokens.bos) r.special(*tokens.bos, false);
  r.text(prompt, false);
  r.text(response, true);
  const bool ends_with_eos = tokens.eos && response.size() >= tokens.eos->size() &&
                             response.compare(response.size() - tokens.eos->size(), tokens.eos->size(), *tokens.eos) == 0;
  if (tokens.eos && !ends_with_eos) r.special(*tokens.eos, true);
  return r;
}

}  // namespace

Rendered split_at_prompt(const Rendered& full, std::size_t prompt_bytes, const std::string& where) {
  Rendered out;
  out.set_parse_special(full.parse_special());
  std::size_t at = 0;
  for (const Piece& p : full.pieces()) {
    const std::size_t end = at + p.text.size();
    if (p.special) {
      if (at < prompt_bytes && prompt_bytes < end)
        throw FormatError(where + ": the prompt ends inside the special token " + p.text);
      out.special(p.text, at >= prompt_bytes);
    } else if (end <= prompt_bytes) {
      out.text(p.text, false);
    } else if (at >= prompt_bytes) {
      out.text(p.text, true);
    } else {
      out.text(std::string_view(p.text).substr(0, prompt_bytes - at), false);
      out.text(std::string_view(p.text).substr(prompt_bytes - at), true);
    }
    at = end;
  }
  return out;
}

Rendered render_prompt(const OrderedJson& record, const Columns& columns, const ChatRendering& chat, const std::string& where) {
  auto it = record.find(columns.prompt);
  if (it == record.end()) throw FormatError(where + ": missing key \"" + columns.prompt + "\" (data.columns.prompt)");
  if (it->is_string()) {
    const std::string& prompt = it->get_ref<const std::string&>();
    if (prompt.empty()) throw FormatError(where + ": " + columns.prompt + " is empty");
    Rendered r;
    if (chat.tokens.add_bos && chat.tokens.bos) r.special(*chat.tokens.bos, false);
    r.text(prompt, false);
    return r;
  }
  if (!it->is_array())
    throw FormatError(where + ": key \"" + columns.prompt + "\" expected a string or a list of messages, found " + json_type_name(*it) +
                      " (data.columns.prompt)");
  const Conversation prompt = parse_conversation(record, columns.prompt, where);
  if (prompt.empty()) throw FormatError(where + ": " + columns.prompt + " has no messages");
  return render_conversation(prompt, true, chat, where);
}

std::array<Rendered, 2> render_preference(const OrderedJson& record, const Columns& columns, const ChatRendering& chat,
                                          const std::string& where) {
  auto prompt_it = record.find(columns.prompt);
  if (prompt_it == record.end())
    throw FormatError(where + ": missing key \"" + columns.prompt + "\" (data.columns.prompt)");
  const std::pair<const std::string*, const char*> responses[] = {{&columns.chosen, "data.columns.chosen"},
                                                                   {&columns.rejected, "data.columns.rejected"}};
  std::array<Rendered, 2> out;
  if (prompt_it->is_string()) {
    const std::string prompt = prompt_it->get<std::string>();
    if (prompt.empty()) throw FormatError(where + ": " + columns.prompt + " is empty");
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& [column, option] = responses[k];
      const std::string response = *string_column(record, *column, option, where, true);
      if (response.empty()) throw FormatError(where + ": " + *column + " is empty (a response needs at least one token)");
      out[k] = standard(prompt, response, chat.tokens);
    }
    return out;
  }
  if (!prompt_it->is_array())
    throw FormatError(where + ": key \"" + columns.prompt + "\" expected a string or a list of messages, found " +
                      json_type_name(*prompt_it) + " (data.columns.prompt)");
  const Conversation prompt = parse_conversation(record, columns.prompt, where);
  const std::string prompt_text = render_conversation(prompt, true, chat, where).str();
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& [column, option] = responses[k];
    auto it = record.find(*column);
    if (it == record.end()) throw FormatError(where + ": missing key \"" + *column + "\" (" + option + ")");
    Conversation conv = prompt;
    if (it->is_string()) {
      if (it->get_ref<const std::string&>().empty())
        throw FormatError(where + ": " + *column + " is empty (a response needs at least one token)");
      conv.push_back({Role::assistant, it->get<std::string>()});
    } else if (it->is_array()) {
      for (Message& m : parse_conversation(record, *column, where)) {
        if (m.content.empty()) throw FormatError(where + ": " + *column + " has an empty message (a response needs at least one token)");
        conv.push_back(std::move(m));
      }
    } else {
      throw FormatError(where + ": key \"" + *column + "\" expected a string or a list of messages, found " +
                        json_type_name(*it) + " (" + option + ")");
    }
    const Rendered full = render_conversation(conv, false, chat, where);
    const std::string text = full.str();
    if (text.compare(0, prompt_text.size(), prompt_text) != 0 || text.size() == prompt_text.size())
      throw FormatError(where + ": the chat format renders the prompt differently inside prompt + " + *column +
                        " (the response cannot be told from the prompt); use the standard form (strings) for this record");
    out[k] = split_at_prompt(full, prompt_text.size(), where);
  }
  return out;
}

}  // namespace ctune::data
