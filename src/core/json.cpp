#include "core/json.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"

namespace ctune {

void check_json_depth(std::string_view text, const std::string& where, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw FormatError(where + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
                          std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

namespace {
template <class J>
J parse_any(const std::string& text, const std::string& where) {
  check_json_depth(text, where);
  try {
    return J::parse(text);
  } catch (const typename J::exception& e) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 3: ..."
    // (or out_of_range.406, "number overflow parsing '1e400'": a number beyond double's range)
    std::string msg = e.what();
    auto pos = msg.find("] ");
    if (pos != std::string::npos) msg = msg.substr(pos + 2);
    throw FormatError(where + ": invalid JSON (" + msg + ")");
  }
}
}  // namespace

Json parse_json(const std::string& text, const std::string& where) { return parse_any<Json>(text, where); }
OrderedJson parse_json_ordered(const std::string& text, const std::string& where) {
  return parse_any<OrderedJson>(text, where);
}

Json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  require_regular_file(path, "a JSON file");  // before the size cap: /dev/zero has no size
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes) {
    throw FormatError(path.string() + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                      " a JSON file of this kind may have");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(path.string() + ": read failed");
  return parse_json(ss.str(), path.string());
}

std::string json_type_name(const Json& value) { return json_type_name(value.type()); }
std::string json_type_name(const OrderedJson& value) { return json_type_name(value.type()); }

std::string json_type_name(nlohmann::detail::value_t type) {
  switch (type) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    default: return "an unknown value";
  }
}

namespace {
const Json* field(const Json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void wrong_type(const std::string& where, const std::string& key, const char* expected,
                             const Json& found) {
  throw FormatError(where + ": key \"" + key + "\" expected " + expected + ", found " +
                    json_type_name(found) + " (" + found.dump().substr(0, 60) + ")");
}
}  // namespace

std::optional<std::int64_t> json_int(const Json& obj, const std::string& key, const std::string& where) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) wrong_type(where, key, "an integer below 2^63", *v);
    return static_cast<std::int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<std::int64_t>();
  // Some writers emit 4096.0 for integers; accept exact integral floats.
  if (v->is_number_float()) {
    // Range first: casting a double beyond int64 (1e30) is undefined behaviour (found by fuzzing).
    const double d = v->get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return static_cast<std::int64_t>(d);
  }
  wrong_type(where, key, "an integer", *v);
}

std::optional<double> json_number(const Json& obj, const std::string& key, const std::string& where) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(where, key, "a number", *v);
  return v->get<double>();
}

std::optional<bool> json_bool(const Json& obj, const std::string& key, const std::string& where) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(where, key, "true or false", *v);
  return v->get<bool>();
}

std::optional<std::string> json_string(const Json& obj, const std::string& key, const std::string& where) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(where, key, "a string", *v);
  return v->get<std::string>();
}

}  // namespace ctune
