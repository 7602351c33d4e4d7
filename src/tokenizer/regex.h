// Oniguruma-backed regular expressions for tokenizer.json patterns (Split pre-tokenizer,
// Replace normalizer/decoder, the GPT-2 ByteLevel regex). Hugging Face's Rust crate runs these
// patterns with Oniguruma (default syntax, UTF-8, no options); using the same engine gives the
// same matches for \p{L}, (?i:...), possessive quantifiers and lookahead. std::regex cannot run
// these patterns and is never used. A Regex is compiled once and searched concurrently from any
// number of threads.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ctune::tok {

struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

class Regex {
 public:
  // Throws FormatError naming `where` when Oniguruma rejects the pattern.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-empty, non-overlapping matches in `text`, left to right, to `out`.
  // Empty matches are skipped: they never produce a piece in any split behaviour we use.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

// The tokenizer.json pattern object: {"String": "literal"} or {"Regex": "oniguruma pattern"}.
// Literal patterns are searched with plain substring search.
class Pattern {
 public:
  // Parses the pattern object at `where`; FormatError on any other shape.
  Pattern(const nlohmann::json& obj, const std::string& where);
  explicit Pattern(std::string literal) : literal_(std::move(literal)) {}

  void find_all(std::string_view text, std::vector<Span>& out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace ctune::tok
