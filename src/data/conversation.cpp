// Conversation parsing and validation; see conversation.h.
#include "data/conversation.h"

#include "core/error.h"

namespace ctune::data {

const char* role_name(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
  }
  return "?";
}

Conversation parse_conversation(const OrderedJson& record, const std::string& column, const std::string& where) {
  auto it = record.find(column);
  if (it == record.end())
    throw FormatError(where + ": missing key \"" + column + "\" (data.columns.messages)");
  if (!it->is_array())
    throw FormatError(where + ": key \"" + column + "\" expected a list of messages, found " + json_type_name(*it) +
                      " (data.columns.messages)");
  if (it->empty()) throw FormatError(where + ": " + column + " is empty");
  Conversation conv;
  conv.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    const OrderedJson& m = (*it)[i];
    const std::string at = where + ": " + column + "[" + std::to_string(i) + "]";
    if (!m.is_object()) throw FormatError(at + ": expected an object {\"role\", \"content\"}, found " + json_type_name(m));
    auto role = m.find("role");
    if (role == m.end()) throw FormatError(at + ": missing key \"role\"");
    if (!role->is_string()) throw FormatError(at + ".role: expected a string, found " + json_type_name(*role));
    Message msg;
    const std::string& r = role->get_ref<const std::string&>();
    if (r == "system")
      msg.role = Role::system;
    else if (r == "user")
      msg.role = Role::user;
    else if (r == "assistant")
      msg.role = Role::assistant;
    else
      throw FormatError(at + ".role: unknown role \"" + r + "\" (expected system | user | assistant)");
    auto content = m.find("content");
    if (content == m.end()) throw FormatError(at + ": missing key \"content\"");
    if (!content->is_string())
      throw FormatError(at + ".content: expected a string, found " + json_type_name(*content));
    for (const char* key : {"tool_calls", "reasoning_content"}) {
      auto extra = m.find(key);
      if (extra != m.end() && !extra->is_null())
        throw FormatError(at + ": key \"" + key + "\" is not supported (only role and content are rendered)");
    }
    msg.content = content->get<std::string>();
    conv.push_back(std::move(msg));
  }
  return conv;
}

}  // namespace ctune::data
