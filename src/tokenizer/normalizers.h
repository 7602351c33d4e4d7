// tokenizer.json `normalizer` section: the text rewrites applied to each non-added-token
// segment before pre-tokenisation (NFC/NFD/NFKC/NFKD, Sequence, Replace, Prepend, Lowercase,
// Strip, StripAccents). Semantics follow the Rust `tokenizers` crate.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace ctune::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by `config` (a JSON object); returns nullptr for JSON null.
// `where` names the location for errors ("tokenizer.json: normalizer").
// UnsupportedError for an unknown "type", FormatError for malformed fields.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& where);

}  // namespace ctune::tok
