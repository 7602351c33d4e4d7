// Unicode helpers every tokenizer component shares: UTF-8 decoding and encoding (validity and
// repair are core/utf8.h's), the character classes Hugging Face tokenizers uses from Rust's
// `char` (is_whitespace, is_alphanumeric, is_numeric, regex `\w`), normalisation forms and full
// lowercasing through utf8proc, and GPT-2's bytes-to-unicode table used by byte-level BPE. Pure
// functions, no state beyond constant tables.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ctune::tok {

// Decodes the code point starting at s[i] and advances i. The input must be valid UTF-8 (the
// tokenizers repair their input once with `repair_utf8` before any other step).
inline std::uint32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  if (b0 < 0xE0) {
    std::uint32_t cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    std::uint32_t cp = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                       (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return cp;
  }
  std::uint32_t cp = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                     ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
                     (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return cp;
}

// Byte length of the UTF-8 sequence that starts with `lead` (1 for stray continuation bytes).
inline std::size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, std::uint32_t cp);

// Rust `char::is_whitespace` (the White_Space property).
bool is_whitespace(std::uint32_t cp);
// Rust `char::is_alphabetic() || char::is_numeric()`, approximated by general categories L*, N*.
bool is_alphanumeric(std::uint32_t cp);
// Rust `char::is_numeric`: general categories Nd, Nl, No.
bool is_numeric(std::uint32_t cp);
// Regex `\w` as Rust's regex crate defines it: letters, marks, decimal digits, connector
// punctuation, join controls (Alphabetic is approximated by L* + Nl).
bool is_word_char(std::uint32_t cp);
// Unicode punctuation (P*) or ASCII punctuation, as the Punctuation pre-tokenizer uses.
bool is_punctuation(std::uint32_t cp);
// Combining marks (M*), which StripAccents removes.
bool is_mark(std::uint32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormalForm form);

// Full lowercase mapping (Rust's str::to_lowercase): per-code-point mapping plus the two
// context rules Unicode's SpecialCasing defines unconditionally (U+0130 and final sigma).
std::string to_lowercase(std::string_view s);

// Strips White_Space code points from the left and/or right of `s`.
std::string_view strip_whitespace(std::string_view s, bool left, bool right);

// GPT-2's reversible bytes-to-unicode table: byte b is represented by the UTF-8 string
// byte_to_unicode()[b]. unicode_to_byte(cp) returns the byte for such a code point or -1.
const std::array<std::string, 256>& byte_to_unicode();
int unicode_to_byte(std::uint32_t cp);
// The 256 byte values in GPT-2's table order (printable bytes first, then the rest).
const std::array<std::uint8_t, 256>& gpt2_byte_order();

}  // namespace ctune::tok
