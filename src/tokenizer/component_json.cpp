// Component-object accessors for tokenizer.json; see component_json.h.
#include "tokenizer/component_json.h"

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {

std::string component_type(const Json& config, const std::string& where,
                           const std::vector<std::string>& supported) {
  if (!config.is_object()) {
    throw FormatError(where + ": expected an object, found " + json_type_name(config));
  }
  std::string type = require_string(config, "type", where);
  for (const auto& s : supported)
    if (s == type) return type;
  std::string list;
  for (const auto& s : supported) list += (list.empty() ? "" : ", ") + s;
  throw UnsupportedError(where + ".type \"" + type + "\" is not supported (supported: " + list + ")");
}

const Json& require_field(const Json& obj, const std::string& key, const std::string& where) {
  if (!obj.is_object()) throw FormatError(where + ": expected an object, found " + json_type_name(obj));
  auto it = obj.find(key);
  if (it == obj.end()) throw FormatError(where + ": missing key \"" + key + "\"");
  return *it;
}

std::string require_string(const Json& obj, const std::string& key, const std::string& where) {
  const Json& v = require_field(obj, key, where);
  if (!v.is_string()) {
    throw FormatError(where + "." + key + ": expected a string, found " + json_type_name(v));
  }
  return v.get<std::string>();
}

const Json& require_array(const Json& obj, const std::string& key, const std::string& where) {
  const Json& v = require_field(obj, key, where);
  if (!v.is_array()) {
    throw FormatError(where + "." + key + ": expected an array, found " + json_type_name(v));
  }
  return v;
}

std::string optional_string(const Json& obj, const std::string& key, const std::string& where,
                            const std::string& fallback) {
  return json_string(obj, key, where).value_or(fallback);
}

bool optional_bool(const Json& obj, const std::string& key, const std::string& where, bool fallback) {
  return json_bool(obj, key, where).value_or(fallback);
}

std::int64_t optional_int(const Json& obj, const std::string& key, const std::string& where,
                          std::int64_t fallback) {
  return json_int(obj, key, where).value_or(fallback);
}

std::uint32_t require_char(const Json& obj, const std::string& key, const std::string& where,
                           const std::string& fallback) {
  std::string s = optional_string(obj, key, where, fallback);
  if (s.empty() || find_invalid_utf8(s) != std::string::npos ||
      utf8_length(static_cast<unsigned char>(s[0])) != s.size()) {
    throw FormatError(where + "." + key + ": expected a single character, found \"" + s + "\"");
  }
  std::size_t i = 0;
  return next_code_point(s, i);
}

}  // namespace ctune::tok
