// Added-token matching. The scan skips bytes that cannot start any pattern (a 256-entry table),
// so text without special tokens costs one table lookup per byte. At a candidate position the
// trie walk keeps the longest pattern ending there; the first position with a match wins
// (leftmost-longest). A match rejected by single_word is consumed as plain text, as the Rust
// crate's non-overlapping iteration does.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace ctune::tok {

TokenMatcher::TokenMatcher(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens)
    : patterns_(std::move(patterns)), tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (std::size_t p = 0; p < patterns_.size(); ++p) {
    const std::string& s = patterns_[p];
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    std::int32_t node = 0;
    for (char c : s) {
      auto byte = static_cast<unsigned char>(c);
      std::int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<std::int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& ch = nodes_[static_cast<std::size_t>(node)].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(byte, std::int32_t{0})),
                  std::make_pair(byte, next));
      }
      node = next;
    }
    // Two tokens with the same text: the first one listed keeps it.
    if (nodes_[static_cast<std::size_t>(node)].pattern < 0)
      nodes_[static_cast<std::size_t>(node)].pattern = static_cast<int>(p);
  }
}

std::int32_t TokenMatcher::child(std::int32_t node, unsigned char byte) const {
  const auto& ch = nodes_[static_cast<std::size_t>(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(byte, std::int32_t{0}));
  return it != ch.end() && it->first == byte ? it->second : -1;
}

namespace {
bool word_char_before(std::string_view text, std::size_t pos) {
  if (pos == 0) return false;
  std::size_t j = pos - 1;
  while (j > 0 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) --j;
  return is_word_char(next_code_point(text, j));
}
bool word_char_at(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return false;
  return is_word_char(next_code_point(text, pos));
}
}  // namespace

void TokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  std::size_t offset = 0;  // end of the last emitted segment
  std::size_t pos = 0;
  const std::size_t n = text.size();
  while (pos < n) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    int found = -1;
    std::size_t found_end = 0;
    std::int32_t node = 0;
    for (std::size_t k = pos; k < n; ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (nodes_[static_cast<std::size_t>(node)].pattern >= 0) {
        found = nodes_[static_cast<std::size_t>(node)].pattern;
        found_end = k + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = *tokens_[static_cast<std::size_t>(found)];
    if (tok.single_word && (word_char_before(text, pos) || word_char_at(text, found_end))) {
      pos = found_end;
      continue;
    }
    std::size_t start = pos, stop = found_end;
    if (tok.lstrip) {
      std::string_view before = strip_whitespace(text.substr(offset, start - offset), false, true);
      start = offset + before.size();
    }
    if (tok.rstrip) {
      std::string_view after = strip_whitespace(text.substr(stop), true, false);
      stop = n - after.size();
    }
    if (start > offset) out.push_back({offset, start, -1});
    out.push_back({start, stop, found});
    offset = stop;
    pos = stop;
  }
  if (offset < n) out.push_back({offset, n, -1});
}

void TokenMatcher::special_as_text(std::vector<Segment>& segments) const {
  std::vector<Segment> out;
  for (Segment s : segments) {
    if (s.token >= 0 && token(s.token).special) s.token = -1;
    if (s.token < 0 && !out.empty() && out.back().token < 0 && out.back().end == s.begin) {
      out.back().end = s.end;
    } else {
      out.push_back(s);
    }
  }
  segments = std::move(out);
}

}  // namespace ctune::tok
