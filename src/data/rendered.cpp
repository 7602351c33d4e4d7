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

namespace {

using tmpl::is_py_space;  // str.isspace(), one home: the template layer's Python string rules

// Length in bytes of the UTF-8 sequence starting with `lead` (1 for an invalid lead byte).
std::size_t seq_len(unsigned char lead) {
  if (lead >= 0xF0 && lead < 0xF8) return 4;
  if (lead >= 0xE0) return lead < 0xF0 ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

std::uint32_t decode_at(std::string_view s, std::size_t i, std::size_t n) {
  auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return b(0);
  }
}

std::size_t leading_space(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t n = seq_len(static_cast<unsigned char>(s[i]));
    if (i + n > s.size() || !is_py_space(decode_at(s, i, n))) break;
    i += n;
  }
  return i;
}

// Start of the trailing whitespace run.
std::size_t trailing_space(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    std::size_t n = seq_len(static_cast<unsigned char>(s[start]));
    if (start + n != end || !is_py_space(decode_at(s, start, n))) break;
    end = start;
  }
  return end;
}

}  // namespace

void Rendered::trained_text(std::string_view s) {
  // The whitespace run as the pre-tokenizer regex's \s sees it (Unicode White_Space, which
  // unlike Python's isspace() excludes U+001C..U+001F).
  std::size_t i = 0, cut = 0;
  while (i < s.size()) {
    std::size_t n = seq_len(static_cast<unsigned char>(s[i]));
    if (i + n > s.size()) break;
    std::uint32_t cp = decode_at(s, i, n);
    if (!is_py_space(cp) || (cp >= 0x1C && cp <= 0x1F)) break;
    i += n;
    if (cp == '\n' || cp == '\r') cut = i;
  }
  text(s.substr(0, cut), false);
  text(s.substr(cut), true);
}

std::string py_lstrip(std::string_view s) { return std::string(s.substr(leading_space(s))); }
std::string py_rstrip(std::string_view s) { return std::string(s.substr(0, trailing_space(s))); }
std::string py_strip(std::string_view s) {
  std::string_view left = s.substr(leading_space(s));
  return std::string(left.substr(0, trailing_space(left)));
}

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
