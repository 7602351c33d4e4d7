// Unicode helpers: character classes, normalisation, lowercasing and GPT-2's
// byte table. Character properties come from utf8proc so that every component agrees on one
// Unicode version (utf8proc 2.8: Unicode 15).
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace ctune::tok {

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(std::uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
utf8proc_category_t category(std::uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
bool is_letter_category(utf8proc_category_t c) {
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_mark_category(utf8proc_category_t c) {
  return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
}
bool is_number_category(utf8proc_category_t c) {
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}
bool is_cased(std::uint32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}
}  // namespace

bool is_alphanumeric(std::uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
  auto c = category(cp);
  return is_letter_category(c) || is_number_category(c);
}

bool is_numeric(std::uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return is_number_category(category(cp));
}

bool is_word_char(std::uint32_t cp) {
  if (cp < 0x80) return is_alphanumeric(cp) || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  auto c = category(cp);
  return is_letter_category(c) || is_mark_category(c) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

bool is_punctuation(std::uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_mark(std::uint32_t cp) {
  return cp >= 0x300 && is_mark_category(category(cp));
}

std::string normalize(std::string_view s, NormalForm form) {
  // ASCII is invariant under every form; most text takes this path.
  bool ascii = true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  if (n < 0) throw FormatError(std::string("unicode normalisation failed: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

std::string to_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t start = i;
    std::uint32_t cp = next_code_point(s, i);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {
      out += "i\xCC\x87";  // İ -> i + combining dot above
    } else if (cp == 0x3A3) {
      // Final sigma (simplified SpecialCasing context: case-ignorable characters between
      // the letters are not skipped): a cased letter before, none after.
      bool before = false, after = false;
      if (start > 0) {
        std::size_t j = start - 1;
        while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
        before = is_cased(next_code_point(s, j));
      }
      if (i < s.size()) {
        std::size_t k = i;
        after = is_cased(next_code_point(s, k));
      }
      out += (before && !after) ? "\xCF\x82" : "\xCF\x83";
    } else {
      append_utf8(out, static_cast<std::uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

std::string_view strip_whitespace(std::string_view s, bool left, bool right) {
  if (left) {
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t j = i;
      if (!is_whitespace(next_code_point(s, j))) break;
      i = j;
    }
    s.remove_prefix(i);
  }
  if (right) {
    std::size_t end = s.size();
    while (end > 0) {
      std::size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t j = start;
      if (!is_whitespace(next_code_point(s, j))) break;
      end = start;
    }
    s = s.substr(0, end);
  }
  return s;
}

namespace {
struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<std::uint8_t, 256> order{};
  std::array<int, 324> to_byte{};  // code points used by the table are all below 324
  ByteTables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes are shifted to
    // U+0100.. in byte order, so every byte becomes a visible, non-space character.
    int n = 0, next = 0;
    auto keep = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    for (int b = 0; b < 256; ++b)
      if (keep(b)) order[static_cast<std::size_t>(next++)] = static_cast<std::uint8_t>(b);
    for (int b = 0; b < 256; ++b) {
      std::uint32_t cp = keep(b) ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + n++);
      if (!keep(b)) order[static_cast<std::size_t>(next++)] = static_cast<std::uint8_t>(b);
      append_utf8(to_unicode[static_cast<std::size_t>(b)], cp);
      to_byte[cp] = b;
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}
}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  return byte_tables().to_unicode;
}
const std::array<std::uint8_t, 256>& gpt2_byte_order() {
  return byte_tables().order;
}
int unicode_to_byte(std::uint32_t cp) {
  return cp < 324 ? byte_tables().to_byte[cp] : -1;
}

}  // namespace ctune::tok
