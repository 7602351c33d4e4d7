// The one schema of recipe keys (Marian-style): every key a recipe may hold, with its type,
// default, allowed values or range, and one line of help. Validation, "did you mean"
// suggestions, the resolved recipe that `ctune validate` prints and every run writes, and the
// resume compatibility check all read it; recipes only select values.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ctune {

enum class KeyType {
  String,      // any string, or one of `allowed`
  Int,         // integer within [min, max]
  Float,       // number within [min, max]
  Bool,
  StringList,  // list of strings, each one of `allowed` when given
  FloatList,   // list of numbers within [min, max]; `length` fixes the count when > 0
  Path,        // a path (relative to the working directory)
  Map,         // a mapping of names to scalars (strings, numbers, booleans, null), kept as JSON
};

// Extra checks a type and range cannot express; return an error text or "" when fine.
using KeyCheck = std::string (*)(const std::string& value);

struct KeySpec {
  std::string key;           // dotted: "optimizer.lr"
  KeyType type = KeyType::String;
  std::string default_yaml;  // YAML text of the default: "2.0e-4", "null", "[q_proj, v_proj]"
  std::string help;
  std::vector<std::string> allowed = {};
  std::optional<double> min = std::nullopt;  // inclusive
  std::optional<double> max = std::nullopt;  // inclusive
  bool nullable = false;     // null is a valid value
  bool required = false;     // must be given (no default)
  std::size_t length = 0;    // FloatList: exact element count
  KeyCheck check = nullptr;  // String: custom validation
  bool resumable = false;    // --resume may change it (observation, length, sharing; not what is computed)
  bool planned = false;      // "auto" hands it to the planner (`ctune plan`, `train --fit`; docs/planning.md)
  // The objective.name values this key belongs to (docs/objectives.md#adding-an-objective); empty:
  // every objective. A recipe that sets it under another objective is refused, naming these.
  std::vector<std::string> objectives = {};
};

const std::vector<KeySpec>& recipe_schema();
// The value a planned key holds when the planner is to choose it.
inline constexpr const char* kAutoValue = "auto";
const KeySpec* find_key_spec(const std::string& key);

// The closest known key to an unknown one ("" when nothing is close): same leaf name in
// another section first, then the smallest edit distance.
std::string suggest_key(const std::string& unknown);

// "an integer >= 1", "one of fp32, bf16, fp16", ... for messages and help.
std::string describe_expected(const KeySpec& spec);

}  // namespace ctune
