// JSON reading with errors that name the file and key. Used for config.json, safetensors
// headers, index files, tokenizer.json and tokenizer_config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ctune {

using Json = nlohmann::json;

// Parses `text`; `where` names the source in the error ("config.json", "header of x.safetensors").
Json parse_json(const std::string& text, const std::string& where);

// Reads and parses a whole file; IoError when it cannot be read, FormatError when not JSON.
Json read_json_file(const std::filesystem::path& path);

// Name of a JSON value's type for messages ("a string", "an integer", "null" ...).
std::string json_type_name(const Json& value);

// Typed field access. `where` is the file (and object path) for messages. A missing key or a
// JSON null gives the fallback (or nullopt); a present value of the wrong type is a FormatError.
std::optional<std::int64_t> json_int(const Json& obj, const std::string& key, const std::string& where);
std::optional<double> json_number(const Json& obj, const std::string& key, const std::string& where);
std::optional<bool> json_bool(const Json& obj, const std::string& key, const std::string& where);
std::optional<std::string> json_string(const Json& obj, const std::string& key, const std::string& where);

}  // namespace ctune
