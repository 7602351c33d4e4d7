// Reading the component objects of tokenizer.json (normalizer, pre_tokenizer, model,
// post_processor, decoder) with one-line errors: the file and key path, what was expected and
// what was found. Thin layer over core/json.h shared by every component factory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"

namespace ctune::tok {

// The "type" of a component object. FormatError when `config` is not an object or has no
// string "type"; UnsupportedError naming the type when it is not in `supported`.
std::string component_type(const Json& config, const std::string& where,
                           const std::vector<std::string>& supported);

// Required fields: FormatError when missing or of the wrong type.
const Json& require_field(const Json& obj, const std::string& key, const std::string& where);
std::string require_string(const Json& obj, const std::string& key, const std::string& where);
const Json& require_array(const Json& obj, const std::string& key, const std::string& where);

// Optional fields with a default (JSON null counts as missing).
std::string optional_string(const Json& obj, const std::string& key, const std::string& where,
                            const std::string& fallback);
bool optional_bool(const Json& obj, const std::string& key, const std::string& where, bool fallback);
std::int64_t optional_int(const Json& obj, const std::string& key, const std::string& where,
                          std::int64_t fallback);

// A field that must hold exactly one character (Metaspace replacement, Strip content).
std::uint32_t require_char(const Json& obj, const std::string& key, const std::string& where,
                           const std::string& fallback);

// The members of a Sequence component: builds config[key][i] with `make` (a factory taking the
// member's JSON and its location), dropping null members.
template <typename T, typename Make>
std::vector<std::unique_ptr<T>> make_members(const Json& config, const std::string& key,
                                             const std::string& where, Make make) {
  const Json& list = require_array(config, key, where);
  std::vector<std::unique_ptr<T>> members;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto m = make(list[i], where + "." + key + "[" + std::to_string(i) + "]");
    if (m) members.push_back(std::move(m));
  }
  return members;
}

}  // namespace ctune::tok
