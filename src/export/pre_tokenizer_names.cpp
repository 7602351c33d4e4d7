// Recognises the three pre-tokenizer shapes of pre_tokenizer_names.h. A Sequence is flattened
// first; the parts must be exactly the expected components (a Split with the Isolated behaviour
// and invert=false, then a ByteLevel without its own regex), so a file that adds, say, a Digits
// splitter is refused rather than mislabelled.
#include "export/pre_tokenizer_names.h"

#include <vector>

#include "core/error.h"

namespace ctune::exporter {

namespace {

// Fields read without throwing on a wrong type (a wrong type simply does not match).
std::string str_field(const Json& node, const char* key, const std::string& fallback) {
  return node.is_object() && node.contains(key) && node[key].is_string() ? node[key].get<std::string>() : fallback;
}

bool bool_field(const Json& node, const char* key, bool fallback) {
  return node.is_object() && node.contains(key) && node[key].is_boolean() ? node[key].get<bool>() : fallback;
}

std::string type_of(const Json& node) { return str_field(node, "type", "?"); }

bool byte_level(const Json& node, bool use_regex) {
  return type_of(node) == "ByteLevel" && bool_field(node, "use_regex", true) == use_regex;
}

void flatten(const Json& node, std::vector<const Json*>& out) {
  if (str_field(node, "type", "") == "Sequence" && node.contains("pretokenizers") && node["pretokenizers"].is_array()) {
    for (const Json& p : node["pretokenizers"]) flatten(p, out);
  } else {
    out.push_back(&node);
  }
}

std::string describe(const std::vector<const Json*>& parts) {
  std::string out;
  for (const Json* p : parts) {
    if (!out.empty()) out += " + ";
    out += type_of(*p);
    if (type_of(*p) == "Split" && p->is_object() && p->contains("pattern")) out += "(" + (*p)["pattern"].dump() + ")";
    if (type_of(*p) == "ByteLevel") out += std::string("(use_regex=") + (bool_field(*p, "use_regex", true) ? "true" : "false") + ")";
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string llama_cpp_pre_tokenizer(const Json& pre_tokenizer, const std::string& where) {
  std::vector<const Json*> parts;
  if (!pre_tokenizer.is_null()) flatten(pre_tokenizer, parts);
  if (parts.size() == 1 && byte_level(*parts[0], true)) return "gpt-2";
  if (parts.size() == 2 && type_of(*parts[0]) == "Split" && byte_level(*parts[1], false)) {
    const Json& split = *parts[0];
    const Json pattern = split.contains("pattern") ? split["pattern"] : Json();
    const bool isolated = str_field(split, "behavior", "") == "Isolated" && !bool_field(split, "invert", false);
    if (isolated && pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      const std::string regex = pattern["Regex"].get<std::string>();
      if (regex == kLlama3Pattern) return "llama-bpe";
      if (regex == kQwen2Pattern) return "qwen2";
    }
  }
  throw UnsupportedError(where + ": llama.cpp has no pre-tokenizer for " + describe(parts) +
                         " (known: the Llama-3 and Qwen2 Split patterns, GPT-2's ByteLevel)");
}

}  // namespace ctune::exporter
