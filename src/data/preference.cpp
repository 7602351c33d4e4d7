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

namespace {

// A record's prompt, read once for each of its responses: a string (the standard form) or a
// conversation with its rendering (generation prompt included) for the conversational form.
struct Prompt {
  bool conversational = false;
  std::string text;     // the standard form's prompt
  Conversation conv;    // the conversational form's messages
  std::string rendered; // and their rendering with the generation prompt
};

Prompt read_prompt(const OrderedJson& record, const Columns& columns, const ChatRendering& chat, const std::string& where) {
  auto it = record.find(columns.prompt);
  if (it == record.end()) throw FormatError(where + ": missing key \"" + columns.prompt + "\" (data.columns.prompt)");
  Prompt p;
  if (it->is_string()) {
    p.text = it->get<std::string>();
    if (p.text.empty()) throw FormatError(where + ": " + columns.prompt + " is empty");
    return p;
  }
  if (!it->is_array())
    throw FormatError(where + ": key \"" + columns.prompt + "\" expected a string or a list of messages, found " + json_type_name(*it) +
                      " (data.columns.prompt)");
  p.conversational = true;
  p.conv = parse_conversation(record, columns.prompt, where);
  p.rendered = render_conversation(p.conv, true, chat, where).str();
  return p;
}

// prompt + the response in record[column] (`option` names the recipe key of the column).
Rendered with_response(const Prompt& prompt, const OrderedJson& record, const std::string& column, const char* option,
                       const ChatRendering& chat, const std::string& where) {
  if (!prompt.conversational) {
    const std::string response = *string_column(record, column, option, where, true);
    if (response.empty()) throw FormatError(where + ": " + column + " is empty (a response needs at least one token)");
    return standard(prompt.text, response, chat.tokens);
  }
  auto it = record.find(column);
  if (it == record.end()) throw FormatError(where + ": missing key \"" + column + "\" (" + option + ")");
  Conversation conv = prompt.conv;
  if (it->is_string()) {
    if (it->get_ref<const std::string&>().empty())
      throw FormatError(where + ": " + column + " is empty (a response needs at least one token)");
    conv.push_back({Role::assistant, it->get<std::string>()});
  } else if (it->is_array()) {
    for (Message& m : parse_conversation(record, column, where)) {
      if (m.content.empty()) throw FormatError(where + ": " + column + " has an empty message (a response needs at least one token)");
      conv.push_back(std::move(m));
    }
  } else {
    throw FormatError(where + ": key \"" + column + "\" expected a string or a list of messages, found " + json_type_name(*it) + " (" +
                      option + ")");
  }
  const Rendered full = render_conversation(conv, false, chat, where);
  const std::string text = full.str();
  if (text.compare(0, prompt.rendered.size(), prompt.rendered) != 0 || text.size() == prompt.rendered.size())
    throw FormatError(where + ": the chat format renders the prompt differently inside prompt + " + column +
                      " (the response cannot be told from the prompt); use the standard form (strings) for this record");
  return split_at_prompt(full, prompt.rendered.size(), where);
}

}  // namespace

std::array<Rendered, 2> render_preference(const OrderedJson& record, const Columns& columns, const ChatRendering& chat,
                                          const std::string& where) {
  const Prompt prompt = read_prompt(record, columns, chat, where);
  return {with_response(prompt, record, columns.chosen, "data.columns.chosen", chat, where),
          with_response(prompt, record, columns.rejected, "data.columns.rejected", chat, where)};
}

Unpaired render_unpaired(const OrderedJson& record, const Columns& columns, const ChatRendering& chat, const std::string& where) {
  const Prompt prompt = read_prompt(record, columns, chat, where);
  Unpaired out;
  out.rendered = with_response(prompt, record, columns.completion, "data.columns.completion", chat, where);
  auto it = record.find(columns.label);
  if (it == record.end()) throw FormatError(where + ": missing key \"" + columns.label + "\" (data.columns.label)");
  if (!it->is_boolean()) {
    std::string shown = it->dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    throw FormatError(where + ": key \"" + columns.label + "\" expected true or false, found " + json_type_name(*it) + " " + shown +
                      " (data.columns.label)");
  }
  out.desirable = it->get<bool>();
  return out;
}

}  // namespace ctune::data
