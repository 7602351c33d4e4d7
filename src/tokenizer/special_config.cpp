// tokenizer_config.json / special_tokens_map.json reading. A key set to null clears the token
// (Qwen's "bos_token": null means "no BOS"); a missing key keeps what the tokenizer implied.
#include "tokenizer/special_config.h"

#include "core/error.h"
#include "core/json.h"

namespace ctune::tok {
namespace {

// The token text of a bos_token-style value: "<s>" or {"content": "<s>", ...}.
std::string token_text(const Json& value, const std::string& where, const std::string& key) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  throw FormatError(where + ": key \"" + key + "\" expected a string or {\"content\": ...}, found " +
                    json_type_name(value));
}

void apply_file(const std::filesystem::path& file, bool read_flags, SpecialTokens& special,
                const TokenLookup& lookup) {
  const Json root = read_json_file(file);
  const std::string where = file.string();
  if (!root.is_object()) throw FormatError(where + ": expected a JSON object, found " + json_type_name(root));
  struct Slot {
    const char* key;
    std::optional<std::int32_t>* id;
  };
  const Slot slots[] = {{"bos_token", &special.bos},
                        {"eos_token", &special.eos},
                        {"pad_token", &special.pad},
                        {"unk_token", &special.unk}};
  for (const Slot& s : slots) {
    auto it = root.find(s.key);
    if (it == root.end()) continue;
    if (it->is_null()) {
      s.id->reset();
      continue;
    }
    std::string text = token_text(*it, where, s.key);
    auto id = lookup(text);
    if (!id) throw FormatError(where + ": " + s.key + " \"" + text + "\" is not in the vocabulary");
    *s.id = *id;
  }
  if (read_flags) {
    if (auto b = json_bool(root, "add_bos_token", where)) special.add_bos = *b;
    if (auto b = json_bool(root, "add_eos_token", where)) special.add_eos = *b;
  }
}

}  // namespace

void apply_special_token_files(const std::filesystem::path& dir, SpecialTokens& special,
                               const TokenLookup& lookup) {
  const auto config = dir / "tokenizer_config.json";
  const auto map = dir / "special_tokens_map.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) apply_file(config, true, special, lookup);
  if (std::filesystem::is_regular_file(map, ec)) apply_file(map, false, special, lookup);
  const std::string where = config.string();
  if (special.add_bos && !special.bos)
    throw FormatError(where + ": add_bos_token is true but no bos_token is set");
  if (special.add_eos && !special.eos)
    throw FormatError(where + ": add_eos_token is true but no eos_token is set");
}

}  // namespace ctune::tok
