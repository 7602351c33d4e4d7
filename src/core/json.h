// JSON reading with errors that name the file and key. Used for config.json, safetensors
// headers, index files, tokenizer.json and tokenizer_config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ctune {

using Json = nlohmann::json;
// Keeps an object's keys in file order (dataset records rendered by chat templates, where the
// order shows in tojson output); lookups are linear, so only for small objects.
using OrderedJson = nlohmann::ordered_json;

// Bounds on every JSON ctune reads. Parsing, copying, printing and walking a nested value all
// recurse, so a file nested a million deep would overflow the stack; no ctune input needs more
// than a few levels (tokenizer.json components: ~10), so deeper text is refused before parsing.
inline constexpr int kMaxJsonDepth = 128;
// A JSON file read whole (config.json, tokenizer.json, adapter and checkpoint metadata): the
// largest real tokenizer.json files are ~30 MB.
inline constexpr std::uint64_t kMaxJsonFileBytes = 256ull << 20;

// Throws FormatError naming `where` when `text` nests arrays/objects deeper than `max_depth`
// (brackets inside strings do not count).
void check_json_depth(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);

// Parses `text` (depth-checked); `where` names the source in the error ("config.json", "header
// of x.safetensors").
Json parse_json(const std::string& text, const std::string& where);

// Reads and parses a whole file of at most `max_bytes`; IoError when it cannot be read,
// FormatError when it is too large or not JSON.
Json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes = kMaxJsonFileBytes);

// The same keeping objects' key order (dataset records).
OrderedJson parse_json_ordered(const std::string& text, const std::string& where);

// Name of a JSON value's type for messages ("a string", "an integer", "null" ...).
std::string json_type_name(const Json& value);
std::string json_type_name(const OrderedJson& value);
std::string json_type_name(nlohmann::detail::value_t type);

// Typed field access. `where` is the file (and object path) for messages. A missing key or a
// JSON null gives the fallback (or nullopt); a present value of the wrong type is a FormatError.
std::optional<std::int64_t> json_int(const Json& obj, const std::string& key, const std::string& where);
std::optional<double> json_number(const Json& obj, const std::string& key, const std::string& where);
std::optional<bool> json_bool(const Json& obj, const std::string& key, const std::string& where);
std::optional<std::string> json_string(const Json& obj, const std::string& key, const std::string& where);

}  // namespace ctune
