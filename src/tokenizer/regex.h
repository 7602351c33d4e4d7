// Oniguruma-backed regular expressions for tokenizer.json patterns (Split pre-tokenizer,
// Replace normalizer/decoder, the GPT-2 ByteLevel regex). Hugging Face's Rust crate runs these
// patterns with Oniguruma (default syntax, UTF-8, no options); using the same engine gives the
// same matches for \p{L}, (?i:...), possessive quantifiers and lookahead. std::regex cannot run
// these patterns and is never used. A Regex is compiled once and searched concurrently from any
// number of threads. The GRPO rewards (train/objective/rewards.h) compile their patterns here
// too, in Python's syntax and searched with a bound on backtracking (docs/objectives.md#rewards).
#pragma once

#include <cstddef>
#include <cstdint>
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

// The syntax a pattern is written in: Oniguruma's own (tokenizer.json, as the `onig` crate
// compiles it) or Python's `re` (Oniguruma's ONIG_SYNTAX_PYTHON: `^` and `$` at the ends of the
// text only, `(?P<name>...)`, `(?s)` for a `.` that matches newlines), as reward patterns
// written for TRL are.
enum class Syntax { oniguruma, python };

// What a bounded search found.
struct BoundedMatch {
  bool found = false;
  bool over_bound = false;  // gave up after its backtracking steps: neither found nor ruled out
  Span span;                // found: where
};

class Regex {
 public:
  // Throws FormatError naming `where` when Oniguruma rejects the pattern.
  Regex(const std::string& pattern, const std::string& where, Syntax syntax = Syntax::oniguruma);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-empty, non-overlapping matches in `text`, left to right, to `out`.
  // Empty matches are skipped: they never produce a piece in any split behaviour we use.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  // The leftmost match in `text` within `max_steps` backtracking steps over the whole search
  // (Oniguruma's retry limits): a pattern with nested repetition, (a|a)*b, takes time exponential
  // in the text, and a search must end.
  BoundedMatch search(std::string_view text, std::uint64_t max_steps) const;

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
