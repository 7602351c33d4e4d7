// Python str operations on UTF-8; see pystr.h.
#include "template/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <climits>

namespace ctune::tmpl {

std::uint32_t decode_code_point(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3Fu); };
  std::uint32_t cp;
  std::size_t n;
  if (b0 < 0x80) {
    cp = b0;
    n = 1;
  } else if (b0 < 0xE0 && i + 1 < s.size()) {
    cp = ((b0 & 0x1Fu) << 6) | cont(1);
    n = 2;
  } else if (b0 < 0xF0 && i + 2 < s.size()) {
    cp = ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    n = 3;
  } else if (i + 3 < s.size()) {
    cp = ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    n = 4;
  } else {  // truncated sequence: one byte (inputs are validated; this keeps reads in bounds)
    cp = 0xFFFD;
    n = 1;
  }
  i += n;
  return cp;
}

void append_code_point(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::size_t code_point_count(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  out.push_back(s.size());
  return out;
}

bool is_py_space(std::uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x80) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

utf8proc_category_t category(std::uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

bool in_set(std::uint32_t cp, const std::optional<std::string>& chars) {
  if (!chars) return is_py_space(cp);
  std::size_t i = 0;
  while (i < chars->size())
    if (decode_code_point(*chars, i) == cp) return true;
  return false;
}

template <class F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto byte = static_cast<unsigned char>(s[i]);
    if (byte < 0x80) {  // ASCII maps to ASCII: no decoding or encoding
      out += static_cast<char>(f(byte));
      ++i;
    } else {
      append_code_point(out, f(decode_code_point(s, i)));
    }
  }
  return out;
}

// ASCII first: most text is, and lower-casing is what sort, unique, min and max do to every item.
std::uint32_t upper(std::uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
  return static_cast<std::uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
std::uint32_t lower(std::uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  return static_cast<std::uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
bool is_cased_letter(std::uint32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

}  // namespace

bool is_printable(std::uint32_t cp) {
  if (cp == ' ') return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::size_t begin = 0, end = s.size();
  if (left)
    while (begin < end) {
      std::size_t i = begin;
      if (!in_set(decode_code_point(s, i), chars)) break;
      begin = i;
    }
  if (right)
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t i = start;
      if (!in_set(decode_code_point(s, i), chars)) break;
      end = start;
    }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (!from_right) {
      std::size_t pos = 0;
      while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
        const std::size_t at = s.find(*sep, pos);
        if (at == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, at - pos));
        pos = at + sep->size();
      }
      out.emplace_back(s.substr(pos));
      return out;
    }
    std::size_t end = s.size();
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const std::size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace splitting: runs of whitespace separate, empty strings are dropped, and once
  // maxsplit is reached the rest (stripped on the split side) is one item.
  std::vector<std::pair<std::size_t, std::size_t>> words;  // byte ranges
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (is_py_space(decode_code_point(s, j))) {
      i = j;
      continue;
    }
    std::size_t start = i, end = j;
    i = j;
    while (i < s.size()) {
      j = i;
      if (is_py_space(decode_code_point(s, j))) break;
      i = end = j;
    }
    words.emplace_back(start, end);
  }
  if (maxsplit < 0 || static_cast<std::int64_t>(words.size()) <= maxsplit + 0) {
    for (auto [a, b] : words) out.emplace_back(s.substr(a, b - a));
    return out;
  }
  const auto k = static_cast<std::size_t>(maxsplit);
  if (!from_right) {
    for (std::size_t w = 0; w < k; ++w) out.emplace_back(s.substr(words[w].first, words[w].second - words[w].first));
    out.push_back(py_strip(s.substr(words[k].first), std::nullopt, false, true));
  } else {
    const std::size_t first_kept = words.size() - k;
    out.push_back(py_strip(s.substr(0, words[first_kept - 1].second), std::nullopt, true, false));
    for (std::size_t w = first_kept; w < words.size(); ++w)
      out.emplace_back(s.substr(words[w].first, words[w].second - words[w].first));
  }
  return out;
}

void for_each_line(std::string_view s, bool keepends, const std::function<void(std::string_view)>& line) {
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    const std::size_t at = i;
    const std::uint32_t cp = decode_code_point(s, i);
    const bool br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                    cp == 0x2028 || cp == 0x2029;
    if (!br) continue;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    line(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) line(s.substr(start));
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {  // Python inserts `repl` before every code point and at the end
    std::size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      const std::size_t start = i;
      decode_code_point(s, i);
      out.append(s.substr(start, i - start));
    }
    return out;
  }
  std::size_t pos = 0;
  while (count < 0 || done < count) {
    const std::size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out += repl;
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::uint64_t py_replace_size(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count) {
  std::uint64_t matches = old.empty() ? code_point_count(s) + 1 : 0;  // '' matches before each code point and at the end
  if (!old.empty())
    for (std::size_t at = s.find(old); at != std::string_view::npos && (count < 0 || matches < static_cast<std::uint64_t>(count));
         at = s.find(old, at + old.size()))
      ++matches;
  if (count >= 0) matches = std::min(matches, static_cast<std::uint64_t>(count));
  // s.size() - matches * old.size() + matches * repl.size(), without wrapping.
  return s.size() - matches * old.size() + matches * static_cast<std::uint64_t>(repl.size());
}

std::string py_reversed(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    out.append(s.substr(start, end - start));
    end = start;
  }
  return out;
}

std::string py_upper(std::string_view s) { return map_code_points(s, upper); }
std::string py_lower(std::string_view s) { return map_code_points(s, lower); }

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_code_points(s, [&](std::uint32_t cp) {
    const bool cased = is_cased_letter(cp);
    const std::uint32_t r = cased ? (prev_cased ? lower(cp) : upper(cp)) : cp;
    prev_cased = cased;
    return r;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](std::uint32_t cp) {
    const std::uint32_t r = first ? upper(cp) : lower(cp);
    first = false;
    return r;
  });
}

namespace {

// s[start:end] as Python's find, count and tailmatch see it: code-point bounds adjusted as
// CPython's ADJUST_INDICES does (negative from the end, clamped to the string), then the bytes.
struct Window {
  std::int64_t start, end;  // code points; start may exceed end or the length
  std::string_view bytes;   // s[start:end] when start <= end, else empty
};

// The byte offset of code point `k` of s, walking from byte `from` (code point `k_from`).
std::size_t offset_of(std::string_view s, std::int64_t k, std::size_t from = 0, std::int64_t k_from = 0) {
  std::size_t i = from;
  for (std::int64_t n = k_from; n < k && i < s.size(); ++n) decode_code_point(s, i);
  return i;
}

Window window(std::string_view s, std::optional<std::int64_t> start, std::optional<std::int64_t> end) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  std::int64_t b = start.value_or(0), e = end.value_or(len);
  if (e > len) e = len;
  else if (e < 0) e = std::max<std::int64_t>(e + len, 0);
  if (b < 0) b = std::max<std::int64_t>(b + len, 0);
  if (b >= e) return {b, e, {}};
  const std::size_t first = offset_of(s, b);
  return {b, e, s.substr(first, offset_of(s, e, first, b) - first)};
}

}  // namespace

std::int64_t py_find(std::string_view s, std::string_view sub, bool from_right, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end) {
  const Window w = window(s, start, end);
  if (w.end - w.start < static_cast<std::int64_t>(code_point_count(sub))) return -1;
  const std::size_t at = from_right ? w.bytes.rfind(sub) : w.bytes.find(sub);
  if (at == std::string_view::npos) return -1;
  return w.start + static_cast<std::int64_t>(code_point_count(w.bytes.substr(0, at)));
}

std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end) {
  const Window w = window(s, start, end);
  if (w.end - w.start < static_cast<std::int64_t>(code_point_count(sub))) return 0;
  if (sub.empty()) return w.end - w.start + 1;
  std::int64_t n = 0;
  for (std::size_t at = w.bytes.find(sub); at != std::string_view::npos; at = w.bytes.find(sub, at + sub.size())) ++n;
  return n;
}

bool py_tailmatch(std::string_view s, std::string_view sub, bool at_end, std::optional<std::int64_t> start,
                  std::optional<std::int64_t> end) {
  const Window w = window(s, start, end);
  if (w.end - static_cast<std::int64_t>(code_point_count(sub)) < w.start) return false;
  const std::string_view v = w.bytes;
  if (sub.size() > v.size()) return false;  // as many code points, fewer bytes
  return at_end ? v.substr(v.size() - sub.size()) == sub : v.substr(0, sub.size()) == sub;
}

bool py_is(std::string_view s, std::string_view what) {
  if (s.empty()) return false;
  bool any_cased = false;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::uint32_t cp = decode_code_point(s, i);
    const auto c = category(cp);
    const bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
    const bool digit = c == UTF8PROC_CATEGORY_ND;
    if (what == "isdigit" && !digit) return false;
    if (what == "isalpha" && !letter) return false;
    if (what == "isalnum" && !letter && !digit && c != UTF8PROC_CATEGORY_NL && c != UTF8PROC_CATEGORY_NO) return false;
    if (what == "isspace" && !is_py_space(cp)) return false;
    if (what == "islower" || what == "isupper") {
      if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) {
        if (what == "islower") return false;
        any_cased = true;
      } else if (c == UTF8PROC_CATEGORY_LL) {
        if (what == "isupper") return false;
        any_cased = true;
      }
    }
  }
  return (what == "islower" || what == "isupper") ? any_cased : true;
}

bool is_decimal(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::int64_t saturated_index(std::string_view digits) {
  std::int64_t index = 0;
  return std::from_chars(digits.data(), digits.data() + digits.size(), index).ec == std::errc() ? index : INT64_MAX;
}

std::size_t py_word_count(std::string_view s) {
  std::size_t words = 0, i = 0;
  bool in_word = false;
  while (i < s.size()) {
    const std::uint32_t cp = decode_code_point(s, i);
    const auto c = category(cp);
    const bool word = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                      (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
    words += word && !in_word;
    in_word = word;
  }
  return words;
}

std::vector<std::size_t> slice_indices(std::size_t n, std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                                       std::int64_t step) {
  const auto len = static_cast<std::int64_t>(n);
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt, std::int64_t lo, std::int64_t hi) {
    if (!v) return dflt;
    std::int64_t x = *v < 0 ? *v + len : *v;
    return std::clamp(x, lo, hi);
  };
  std::vector<std::size_t> out;
  if (step > 0) {
    const std::int64_t a = clamp(start, 0, 0, len), b = clamp(stop, len, 0, len);
    for (std::int64_t i = a; i < b; i += step) out.push_back(static_cast<std::size_t>(i));
  } else {
    const std::int64_t a = clamp(start, len - 1, -1, len - 1), b = clamp(stop, -1, -1, len - 1);
    for (std::int64_t i = a; i > b; i += step) out.push_back(static_cast<std::size_t>(i));
  }
  return out;
}

}  // namespace ctune::tmpl
