// A resolved recipe: schema defaults, then the YAML file, then `key.sub=value` overrides, every
// value checked against recipe_schema() (type, range, allowed values). Errors name the file (or
// the override) and the key, say what was expected and what was found, and suggest the key
// that was probably meant. Cross-layer rules (LoRA targets exist in the model, tokenizer fits
// the embedding, data files parse) are checked where those layers are built.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace ctune {

class Recipe {
 public:
  // Throws ConfigError (IoError when the file cannot be read).
  static Recipe load(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
  // The same from YAML text; `source` names it in messages.
  static Recipe parse(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides = {});

  // This recipe with `key=value` overrides applied over it (the other keys keep their origins).
  Recipe with(const std::vector<std::string>& overrides) const;
  // This recipe with `keys` back at their schema defaults (origin "default"), as if never set.
  Recipe with_defaults(const std::vector<std::string>& keys) const;

  bool is_null(const std::string& key) const;
  // A planned key (core/recipe_schema.h) left to the planner: `auto`.
  bool is_auto(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<double> get_floats(const std::string& key) const;
  // A Map key's value as a JSON object (empty when null).
  OrderedJson get_map(const std::string& key) const;
  std::optional<std::int64_t> get_optional_int(const std::string& key) const;
  std::optional<double> get_optional_float(const std::string& key) const;
  std::optional<std::string> get_optional_string(const std::string& key) const;

  // The canonical YAML text of a key's value (equal texts mean equal values).
  const std::string& value_text(const std::string& key) const { return value(key).yaml; }

  // Where a key's value came from: the file, an override, or "default" (for messages).
  std::string origin(const std::string& key) const;
  const std::string& source() const { return source_; }

  // Every key, nested by section, as YAML (what `ctune validate` prints and train writes).
  std::string to_yaml() const;

  // Throws ConfigError "<origin>: `key`: <what>" for rules checked outside this class.
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  struct Value {
    std::string yaml;    // canonical YAML text of the value
    std::string origin;  // "recipes/x.yaml:12", "override training.lr=...", "default"
  };
  const Value& value(const std::string& key) const;
  void apply_overrides(const std::vector<std::string>& overrides);

  std::string source_;
  std::map<std::string, Value> values_;
};

}  // namespace ctune
