// Normalizers of tokenizer.json. Each class is a few lines; the factory at the bottom maps the
// JSON "type" to one of them. Rust-crate behaviours worth knowing: Prepend leaves an empty
// string empty; Strip and Lowercase use full Unicode (White_Space, SpecialCasing); Sequence
// applies its members left to right.
#include "tokenizer/normalizers.h"

#include <vector>

#include "core/error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(NormalForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override { return tok::normalize(text, form_); }

 private:
  NormalForm form_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> members)
      : members_(std::move(members)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& m : members_) s = m->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> members_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override { return pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    std::string s;
    s.reserve(prefix_.size() + text.size());
    s.append(prefix_).append(text);
    return s;
  }

 private:
  std::string prefix_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return to_lowercase(text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    return std::string(strip_whitespace(text, left_, right_));
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t start = i;
      std::uint32_t cp = next_code_point(text, i);
      if (!is_mark(cp)) out.append(text.substr(start, i - start));
    }
    return out;
  }
};

// Maps every byte to its GPT-2 visible character (the ByteLevel normalizer).
class ByteLevelNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    const auto& table = byte_to_unicode();
    std::string out;
    out.reserve(text.size() * 2);
    for (char c : text) out += table[static_cast<unsigned char>(c)];
    return out;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, where,
                                          {"Sequence", "NFC", "NFD", "NFKC", "NFKD", "Replace", "Prepend",
                                           "Lowercase", "Strip", "StripAccents", "ByteLevel"});
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalForm::NFKD);
  if (type == "Sequence")
    return std::make_unique<SequenceNormalizer>(
        make_members<Normalizer>(config, "normalizers", where, make_normalizer));
  if (type == "Replace") {
    Pattern pattern(require_field(config, "pattern", where), where + ".pattern");
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), require_string(config, "content", where));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(require_string(config, "prepend", where));
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(optional_bool(config, "strip_left", where, true),
                                             optional_bool(config, "strip_right", where, true));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  return std::make_unique<ByteLevelNormalizer>();
}

}  // namespace ctune::tok
