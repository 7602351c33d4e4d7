// Rendered pieces and Python-compatible string stripping; see rendered.h.
#include "data/rendered.h"

#include <cstdint>

#include "template/pystr.h"

namespace ctune::data {

void Rendered::text(std::string_view s, bool trained) {
  if (s.empty()) return;
  if (!pieces_.empty() && !pieces_.back().special && pieces_.back().trained == trained) {
    pieces_.back().text.append(s);
    return;
  }
  pieces_.push_back(Piece{std::string(s), trained, false});
}

void Rendered::special(std::string_view token, bool trained) {
  pieces_.push_back(Piece{std::string(token), trained, true});
}

std::string Rendered::str() const {
  std::string out;
  for (const Piece& p : pieces_) out += p.text;
  return out;
}

void Rendered::train_all() {
  for (Piece& p : pieces_) p.trained = true;
}

void Rendered::trained_text(std::string_view s) {
  // The whitespace run as the pre-tokenizer regex's \s sees it (Unicode White_Space, which
  // unlike Python's isspace() excludes U+001C..U+001F).
  std::size_t i = 0, cut = 0;
  while (i < s.size()) {
    std::size_t next = i;
    const std::uint32_t cp = tmpl::decode_code_point(s, next);
    if (!tmpl::is_py_space(cp) || (cp >= 0x1C && cp <= 0x1F)) break;
    i = next;
    if (cp == '\n' || cp == '\r') cut = i;
  }
  text(s.substr(0, cut), false);
  text(s.substr(cut), true);
}

// One home for Python's str rules: the template layer's (template/pystr.h).
std::string py_lstrip(std::string_view s) { return tmpl::py_strip(s, std::nullopt, true, false); }
std::string py_rstrip(std::string_view s) { return tmpl::py_strip(s, std::nullopt, false, true); }
std::string py_strip(std::string_view s) { return tmpl::py_strip(s); }

std::string_view lstrip_char(std::string_view s, char c) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == c) ++i;
  return s.substr(i);
}
std::string_view rstrip_char(std::string_view s, char c) {
  std::size_t n = s.size();
  while (n > 0 && s[n - 1] == c) --n;
  return s.substr(0, n);
}
std::string_view strip_char(std::string_view s, char c) { return rstrip_char(lstrip_char(s, c), c); }

}  // namespace ctune::data
