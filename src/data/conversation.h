// A conversation as the chat renderers see it: a non-empty list of messages whose role is
// system, user or assistant and whose content is a string. parse_conversation() turns a
// record's `messages` column into one, rejecting anything a renderer could not reproduce
// faithfully, with the record's location and the message index in the error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace ctune::data {

enum class Role { system, user, assistant };

struct Message {
  Role role = Role::user;
  std::string content;
};

using Conversation = std::vector<Message>;

// "system", "user", "assistant".
const char* role_name(Role role);

// record[column] as a Conversation. FormatError, e.g.
//   "data/train.jsonl:4: missing key \"messages\" (data.columns.messages)"
//   "data/train.jsonl:4: messages[2].role: unknown role \"tool\" (expected system | user | assistant)"
//   "data/train.jsonl:4: messages[1].content: expected a string, found null"
//   "data/train.jsonl:4: messages is empty"
// Keys that would change how a model's template renders the message (tool_calls,
// reasoning_content) are refused rather than silently ignored.
Conversation parse_conversation(const OrderedJson& record, const std::string& column, const std::string& where);

}  // namespace ctune::data
