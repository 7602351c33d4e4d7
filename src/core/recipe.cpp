#include "core/recipe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/json.h"
#include "core/regular_file.h"
#include "core/recipe_schema.h"
#include "core/utf8.h"

namespace ctune {

namespace {

std::string unknown_key_message(const std::string& key) {
  std::string msg = "unknown key `" + key + "`";
  std::string suggestion = suggest_key(key);
  if (!suggestion.empty()) msg += "; did you mean `" + suggestion + "`?";
  return msg;
}

std::string found_text(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsScalar()) return "\"" + node.Scalar() + "\"";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

bool is_yaml_null(const YAML::Node& node) {
  return !node.IsDefined() || node.IsNull() || (node.IsScalar() && (node.Scalar() == "~" || node.Scalar() == "null") &&
                                                node.Tag() != "!");
}

bool parse_int(const std::string& s, std::int64_t* out) {
  if (s.empty()) return false;
  std::size_t used = 0;
  try {
    long long v = std::stoll(s, &used, 10);
    *out = v;
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size();
}

bool parse_float(const std::string& s, double* out) {
  if (s.empty()) return false;
  std::size_t used = 0;
  try {
    *out = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && std::isfinite(*out);
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE") return *out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return *out = false, true;
  return false;
}

// The shortest decimal that reads back as exactly `v` ("0.9", not "0.90000000000000002").
std::string shortest_text(double v) {
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream ss;
    ss.precision(precision);
    ss << v;
    if (std::stod(ss.str()) == v) return ss.str();
  }
  return std::to_string(v);
}

// "precision, peft.method, ..." for the message above.
std::string planned_keys_text() {
  std::string keys;
  for (const auto& spec : recipe_schema())
    if (spec.planned) keys += (keys.empty() ? "" : ", ") + spec.key;
  return keys;
}

bool in_range(const KeySpec& spec, double v) {
  return (!spec.min || v >= *spec.min) && (!spec.max || v <= *spec.max);
}

// Checks `node` against `spec`; returns canonical YAML text or throws with `origin`.
std::string validate(const KeySpec& spec, const YAML::Node& node, const std::string& origin) {
  auto refuse = [&](const std::string& found) -> std::string {
    // `auto` on a key whose value has no auto meaning: say which keys the planner owns.
    const bool unplanned_auto = node.IsScalar() && node.Scalar() == kAutoValue && !spec.planned;
    throw ConfigError(origin + ": `" + spec.key + "` expected " + describe_expected(spec) + ", found " + found +
                      (unplanned_auto ? " (auto is the planner's value for " + planned_keys_text() + " only)" : ""));
  };
  auto bad = [&](const std::string& extra = "") { return refuse(found_text(node) + extra); };
  if (spec.planned && node.IsScalar() && node.Scalar() == kAutoValue) return std::string("\"") + kAutoValue + "\"";
  if (is_yaml_null(node)) {
    if (spec.nullable || (spec.required && origin == "default")) return "null";
    if (spec.required) throw ConfigError(origin + ": `" + spec.key + "` is required (" + spec.help + ")");
    bad();
  }
  switch (spec.type) {
    case KeyType::Int: {
      std::int64_t v = 0;
      if (!node.IsScalar() || !parse_int(node.Scalar(), &v) || !in_range(spec, static_cast<double>(v))) bad();
      return std::to_string(v);
    }
    case KeyType::Float: {
      double v = 0;
      if (!node.IsScalar() || !parse_float(node.Scalar(), &v) || !in_range(spec, v)) bad();
      return shortest_text(v);
    }
    case KeyType::Bool: {
      bool v = false;
      if (!node.IsScalar() || !parse_bool(node.Scalar(), &v)) bad();
      return v ? "true" : "false";
    }
    case KeyType::String:
    case KeyType::Path: {
      if (!node.IsScalar() || node.Scalar().empty()) bad();
      const std::string& v = node.Scalar();
      if (!spec.allowed.empty() && std::find(spec.allowed.begin(), spec.allowed.end(), v) == spec.allowed.end()) bad();
      if (spec.check) {
        std::string problem = spec.check(v);
        if (!problem.empty()) throw ConfigError(origin + ": `" + spec.key + "` " + problem + ", found \"" + v + "\"");
      }
      YAML::Emitter e;
      e << YAML::DoubleQuoted << v;
      return e.c_str();
    }
    case KeyType::StringList: {
      if (!node.IsSequence()) bad();
      YAML::Emitter e;
      e << YAML::Flow << YAML::BeginSeq;
      std::size_t index = 0;
      for (const auto& item : node) {
        ++index;
        // The entry itself, not "a list": `stop: [""]` is one empty string (it would match
        // before any token), not a list of the wrong shape.
        if (!item.IsScalar() || item.Scalar().empty())
          refuse((item.IsScalar() ? std::string("the empty string \"\"") : found_text(item)) + " at item " + std::to_string(index));
        if (!spec.allowed.empty() &&
            std::find(spec.allowed.begin(), spec.allowed.end(), item.Scalar()) == spec.allowed.end()) {
          bad(" (\"" + item.Scalar() + "\" is not one of them)");
        }
        e << item.Scalar();
      }
      e << YAML::EndSeq;
      if (node.size() == 0) bad(" (an empty list)");
      return e.c_str();
    }
    case KeyType::Map: {
      // Kept as JSON text (valid YAML too), so that a scalar's type survives: a quoted "false"
      // stays a string, a plain false becomes a boolean, as YAML reads them.
      if (!node.IsMap()) bad();
      OrderedJson out = OrderedJson::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->first.IsScalar() || it->first.Scalar().empty()) bad(" (a key that is not a name)");
        // A copy (a Node is a handle): yaml-cpp's it-> is a temporary proxy, so a reference to
        // it->second dangles after this line (AddressSanitizer: stack-use-after-scope).
        const YAML::Node v = it->second;
        if (is_yaml_null(v)) {
          out[it->first.Scalar()] = nullptr;
          continue;
        }
        if (!v.IsScalar()) bad(" (\"" + it->first.Scalar() + "\" is not a string, number or boolean)");
        const std::string& text = v.Scalar();
        bool b = false;
        std::int64_t i = 0;
        double d = 0;
        if (v.Tag() == "!") out[it->first.Scalar()] = text;  // quoted
        else if (parse_bool(text, &b)) out[it->first.Scalar()] = b;
        else if (parse_int(text, &i)) out[it->first.Scalar()] = i;
        else if (parse_float(text, &d)) out[it->first.Scalar()] = d;
        else out[it->first.Scalar()] = text;
      }
      return out.dump();
    }
    case KeyType::FloatList: {
      if (!node.IsSequence() || (spec.length && node.size() != spec.length)) bad();
      YAML::Emitter e;
      e << YAML::Flow << YAML::BeginSeq;
      for (const auto& item : node) {
        double v = 0;
        if (!item.IsScalar() || !parse_float(item.Scalar(), &v) || !in_range(spec, v)) bad();
        e << shortest_text(v);
      }
      e << YAML::EndSeq;
      return e.c_str();
    }
  }
  bad();
  return "";
}

// Walks the YAML mapping and calls `leaf(key, node, line)` for every schema key it holds.
template <typename F>
void walk(const YAML::Node& node, const std::string& prefix, const std::string& source, F&& on_leaf) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string where = source + ":" + std::to_string(it->first.Mark().line + 1);
    // YAML allows a mapping or a list as a key (`? [a, b]: 1`); as<std::string> of one throws
    // yaml-cpp's own unlocated error (found by fuzzing).
    if (!it->first.IsScalar())
      throw ConfigError(where + ": a recipe key is a name, found " + found_text(it->first) + " as a key");
    const std::string name = it->first.Scalar();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (find_key_spec(key)) {
      on_leaf(key, it->second, where);
      continue;
    }
    bool is_section = false;
    for (const auto& spec : recipe_schema()) is_section = is_section || spec.key.rfind(key + ".", 0) == 0;
    if (is_section) {
      if (!it->second.IsMap()) {
        throw ConfigError(where + ": `" + key + "` is a section and expects a mapping, found " + found_text(it->second));
      }
      walk(it->second, key, source, on_leaf);
      continue;
    }
    throw ConfigError(where + ": " + unknown_key_message(key));
  }
}

// yaml-cpp parses nested collections recursively, so text nested a million deep would
// overflow the stack. A recipe is a few levels deep (section.key, lists of names); refuse text
// far past that before parsing: more than kMaxRecipeBytes, flow collections ([ {) nested deeper
// than kMaxYamlDepth, or a line opening more block levels (indentation, "- " entries) than that.
constexpr std::size_t kMaxRecipeBytes = 1 << 20;
constexpr int kMaxYamlDepth = 64;

void check_yaml_shape(const std::string& text, const std::string& where) {
  if (text.size() > kMaxRecipeBytes) {
    throw ConfigError(where + ": " + std::to_string(text.size()) + " bytes, more than a recipe may have (" +
                      std::to_string(kMaxRecipeBytes) + ")");
  }
  int flow = 0, line = 1;
  char quote = 0, last = 0;  // last: the previous non-blank character outside quotes on the line
  bool line_start = true, comment = false;
  int indent = 0, dashes = 0;
  auto fail = [&](const char* what) {
    throw ConfigError(where + ":" + std::to_string(line) + ": " + what + " nested deeper than " +
                      std::to_string(kMaxYamlDepth) + " levels");
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      comment = false;
      indent = dashes = 0;
      last = 0;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (line_start) {
      if (c == ' ') {
        if (++indent > 4 * kMaxYamlDepth) fail("block collections");
        continue;
      }
      if (c == '-' && i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '\n')) {
        if (++dashes > kMaxYamlDepth) fail("block sequences");
        indent += 2;
        ++i;
        continue;
      }
      line_start = false;
    }
    if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if ((c == '"' || c == '\'') && (last == 0 || std::strchr(":-[{,?", last) != nullptr)) {
      quote = c;  // a quoted scalar starts only where a scalar can start (not "it's")
    } else if (c == '[' || c == '{') {
      if (++flow > kMaxYamlDepth) fail("flow collections");
    } else if (c == ']' || c == '}') {
      --flow;
    }
    if (c != ' ' && c != '\t' && !quote) last = c;
  }
}

// YAML is Unicode text. Other bytes would reach the resolved recipe's JSON (a mapping's values),
// whose writer throws its own unlocated error on them (found by fuzzing).
void check_utf8(const std::string& text, const std::string& where) {
  const std::size_t at = find_invalid_utf8(text);
  if (at == std::string::npos) return;
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[at]));
  throw ConfigError(where + ":" + std::to_string(line) + ": invalid UTF-8 (byte " + byte + "); a recipe is UTF-8 text");
}

YAML::Node load_yaml(const std::string& text, const std::string& where) {
  check_utf8(text, where);
  check_yaml_shape(text, where);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": invalid YAML (" + e.msg + ")");
  }
}

}  // namespace

Recipe Recipe::load(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  require_regular_file(path, "a recipe file");  // before the size cap: /dev/zero has no size
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open recipe for reading");
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > kMaxRecipeBytes) {
    throw ConfigError(path.string() + ": " + std::to_string(size) + " bytes, more than a recipe may have (" +
                      std::to_string(kMaxRecipeBytes) + ")");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path.string(), overrides);
}

Recipe Recipe::parse(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  Recipe r;
  r.source_ = source;
  // Defaults go through the same validation, so they are canonical (and a broken schema entry
  // fails every test at once).
  for (const auto& spec : recipe_schema()) r.values_[spec.key] = {validate(spec, YAML::Load(spec.default_yaml), "default"), "default"};

  YAML::Node root = load_yaml(yaml, source);
  if (!root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(source + ": a recipe is a YAML mapping of sections, found " + found_text(root));
    walk(root, "", source, [&](const std::string& key, const YAML::Node& node, const std::string& where) {
      r.values_[key] = {validate(*find_key_spec(key), node, where), where};
    });
  }
  r.apply_overrides(overrides);
  // Required keys must have been given by the file or an override.
  for (const auto& spec : recipe_schema()) {
    if (spec.required && r.values_[spec.key].yaml == "null") {
      throw ConfigError(source + ": `" + spec.key + "` is required (" + spec.help + ")");
    }
  }
  return r;
}

void Recipe::apply_overrides(const std::vector<std::string>& overrides) {
  for (const auto& item : overrides) {
    const std::string where = "override `" + (item.size() > 80 ? item.substr(0, 77) + "..." : item) + "`";
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError(where + ": expected key.sub=value");
    const std::string key = item.substr(0, eq);
    const KeySpec* spec = find_key_spec(key);
    if (!spec) throw ConfigError(where + ": " + unknown_key_message(key));
    const std::string text = item.substr(eq + 1);
    YAML::Node node = text.empty() ? YAML::Node(YAML::NodeType::Null) : load_yaml(text, where);
    values_[key] = {validate(*spec, node, where), where};
  }
}

Recipe Recipe::with(const std::vector<std::string>& overrides) const {
  Recipe r = *this;
  r.apply_overrides(overrides);
  return r;
}

Recipe Recipe::with_defaults(const std::vector<std::string>& keys) const {
  Recipe r = *this;
  for (const auto& key : keys) {
    const KeySpec* spec = find_key_spec(key);
    if (!spec) throw std::logic_error("recipe key not in schema: " + key);
    r.values_[key] = {validate(*spec, YAML::Load(spec->default_yaml), "default"), "default"};
  }
  return r;
}

const Recipe::Value& Recipe::value(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::logic_error("recipe key not in schema: " + key);
  return it->second;
}

bool Recipe::is_null(const std::string& key) const { return value(key).yaml == "null"; }

std::string Recipe::get_string(const std::string& key) const {
  if (is_null(key)) throw std::logic_error("recipe key is null: " + key);
  return YAML::Load(value(key).yaml).as<std::string>();
}
std::int64_t Recipe::get_int(const std::string& key) const { return std::stoll(value(key).yaml); }
double Recipe::get_float(const std::string& key) const { return std::stod(value(key).yaml); }
bool Recipe::get_bool(const std::string& key) const { return value(key).yaml == "true"; }
bool Recipe::is_auto(const std::string& key) const { return value(key).yaml == std::string("\"") + kAutoValue + "\""; }

std::vector<std::string> Recipe::get_strings(const std::string& key) const {
  return YAML::Load(value(key).yaml).as<std::vector<std::string>>();
}
std::vector<double> Recipe::get_floats(const std::string& key) const {
  return YAML::Load(value(key).yaml).as<std::vector<double>>();
}
OrderedJson Recipe::get_map(const std::string& key) const {
  if (is_null(key)) return OrderedJson::object();
  return OrderedJson::parse(value(key).yaml);
}
std::optional<std::int64_t> Recipe::get_optional_int(const std::string& key) const {
  if (is_null(key)) return std::nullopt;
  return get_int(key);
}
std::optional<double> Recipe::get_optional_float(const std::string& key) const {
  if (is_null(key)) return std::nullopt;
  return get_float(key);
}
std::optional<std::string> Recipe::get_optional_string(const std::string& key) const {
  if (is_null(key)) return std::nullopt;
  return get_string(key);
}

std::string Recipe::origin(const std::string& key) const { return value(key).origin; }

void Recipe::fail(const std::string& key, const std::string& what) const {
  const std::string& where = value(key).origin;
  throw ConfigError((where == "default" ? source_ + " (default)" : where) + ": `" + key + "`: " + what);
}

std::string Recipe::to_yaml() const {
  // Group keys by their first section, in schema order.
  YAML::Emitter e;
  e << YAML::BeginMap;
  std::string open_section;
  std::vector<std::string> open_path;
  auto close_to = [&](std::size_t depth) {
    while (open_path.size() > depth) {
      e << YAML::EndMap;
      open_path.pop_back();
    }
  };
  // A section's keys together even where the schema interleaves them (memory.* around moe.*
  // and objective.*): keys ordered by where each of their sections first appears, so that no
  // section is written twice.
  std::map<std::string, std::size_t> first_seen;
  auto prefixes = [](const std::string& key) {
    std::vector<std::string> out;
    for (std::size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) out.push_back(key.substr(0, dot));
    out.push_back(key);
    return out;
  };
  for (const auto& spec : recipe_schema())
    for (const auto& prefix : prefixes(spec.key)) first_seen.emplace(prefix, first_seen.size());
  std::vector<const KeySpec*> ordered;
  for (const auto& spec : recipe_schema()) ordered.push_back(&spec);
  auto rank = [&](const KeySpec* spec) {
    std::vector<std::size_t> r;
    for (const auto& prefix : prefixes(spec->key)) r.push_back(first_seen.at(prefix));
    return r;
  };
  std::stable_sort(ordered.begin(), ordered.end(), [&](const KeySpec* a, const KeySpec* b) { return rank(a) < rank(b); });
  for (const KeySpec* spec_ptr : ordered) {
    const KeySpec& spec = *spec_ptr;
    std::vector<std::string> parts;
    std::stringstream ss(spec.key);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    std::size_t common = 0;
    while (common < open_path.size() && common + 1 < parts.size() && open_path[common] == parts[common]) ++common;
    close_to(common);
    for (std::size_t i = common; i + 1 < parts.size(); ++i) {
      e << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open_path.push_back(parts[i]);
    }
    e << YAML::Key << parts.back() << YAML::Value;
    YAML::Node v = YAML::Load(values_.at(spec.key).yaml);
    if (v.IsSequence()) e << YAML::Flow;
    e << v;
  }
  close_to(0);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace ctune
