// Python's int() and float() of a str; see pynum.h.
#include "template/pynum.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "template/pystr.h"

namespace ctune::tmpl {
namespace {

// The text with surrounding whitespace removed and every Unicode decimal digit (category Nd:
// '٣', '３', '𝟑') as its ASCII digit, as Python's _PyUnicode_TransformDecimalAndSpaceToASCII
// prepares a number. Unicode encodes each Nd digit in a run of ten from zero, so a digit's value
// is its distance from the start of its run, modulo 10.
std::string ascii_number(std::string_view text) {
  const std::string s = py_strip(text);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t start = i;
    const std::uint32_t cp = decode_code_point(s, i);
    if (cp < 0x80 || utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_ND) {
      out.append(s, start, i - start);
      continue;
    }
    std::uint32_t zero = cp;
    while (zero > 0 && utf8proc_category(static_cast<utf8proc_int32_t>(zero - 1)) == UTF8PROC_CATEGORY_ND) --zero;
    out += static_cast<char>('0' + (cp - zero) % 10);
  }
  return out;
}

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// Digits of `base` from s[i], single underscores allowed between two digits (PEP 515); calls
// `add` with each digit's value. False when there is not at least one digit.
template <class Add>
bool scan_digits(const std::string& s, std::size_t& i, int base, Add add) {
  if (i >= s.size() || digit_value(s[i]) >= base) return false;
  while (i < s.size()) {
    if (s[i] == '_' && i + 1 < s.size() && digit_value(s[i + 1]) < base) ++i;
    if (digit_value(s[i]) >= base) break;
    add(digit_value(s[i]));
    ++i;
  }
  return true;
}

bool sign(const std::string& s, std::size_t& i) {
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) return s[i++] == '-';
  return false;
}

}  // namespace

std::optional<std::int64_t> py_int(std::string_view text, std::int64_t base_arg, bool& beyond_64_bits) {
  beyond_64_bits = false;
  if (base_arg != 0 && (base_arg < 2 || base_arg > 36)) return std::nullopt;
  int base = static_cast<int>(base_arg);
  const std::string s = ascii_number(text);
  std::size_t i = 0;
  const bool negative = sign(s, i);
  bool prefixed = false;
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    const int named = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (named && (base == 0 || base == named)) {
      base = named;
      prefixed = true;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;  // 0x_1f
    }
  }
  const bool plain_base0 = base == 0;
  if (plain_base0) base = 10;
  const std::size_t first = i;
  std::uint64_t magnitude = 0;
  bool overflow = false, nonzero = false;
  const std::uint64_t limit = negative ? (std::uint64_t{1} << 63) : (std::uint64_t{1} << 63) - 1;
  const auto b = static_cast<std::uint64_t>(base);
  if (!scan_digits(s, i, base, [&](int d) {
        nonzero = nonzero || d != 0;
        if (overflow) return;
        const auto v = static_cast<std::uint64_t>(d);
        if (magnitude > (limit - v) / b) overflow = true;
        else magnitude = magnitude * b + v;
      }))
    return std::nullopt;
  if (i != s.size()) return std::nullopt;
  // Base 0 reads a decimal literal: a leading zero only in zero itself ("00" yes, "010" no).
  if (plain_base0 && !prefixed && s[first] == '0' && nonzero) return std::nullopt;
  if (overflow) {
    beyond_64_bits = true;
    return std::nullopt;
  }
  if (negative) return magnitude == (std::uint64_t{1} << 63) ? INT64_MIN : -static_cast<std::int64_t>(magnitude);
  return static_cast<std::int64_t>(magnitude);
}

std::optional<double> py_float(std::string_view text) {
  const std::string s = ascii_number(text);
  std::size_t i = 0;
  const bool negative = sign(s, i);
  std::string word;
  for (std::size_t k = i; k < s.size(); ++k) word += static_cast<char>(s[k] | 0x20);
  if (word == "inf" || word == "infinity") return negative ? -HUGE_VAL : HUGE_VAL;
  if (word == "nan") return negative ? -std::nan("") : std::nan("");
  // [digits] [. [digits]] [e [sign] digits], at least one digit before the exponent.
  std::string plain = negative ? "-" : "";
  const auto keep = [&](int d) { plain += static_cast<char>('0' + d); };
  const bool whole = scan_digits(s, i, 10, keep);
  bool fraction = false;
  if (i < s.size() && s[i] == '.') {
    plain += '.';
    ++i;
    fraction = scan_digits(s, i, 10, keep);
  }
  if (!whole && !fraction) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    plain += 'e';
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) plain += s[i++];
    if (!scan_digits(s, i, 10, keep)) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  return std::strtod(plain.c_str(), nullptr);  // what it reads is plain decimal: never hex or nan
}

std::optional<double> py_round(double x, std::int64_t ndigits) {
  if (!std::isfinite(x) || x == 0.0 || ndigits > 323) return x;
  if (ndigits < -308) return 0.0 * x;
  // The exact decimal expansion of |x| (a double has at most 1074 digits after the point), as
  // one digit string with the point after `point` digits.
  char buf[1500];
  const auto end = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::fixed, 1074).ptr;
  std::string digits(buf, end);
  const std::size_t point = digits.find('.');
  digits.erase(point, 1);
  // Keep the digits down to 10**-ndigits; the first one dropped and any after decide.
  const std::int64_t keep = static_cast<std::int64_t>(point) + ndigits;
  if (keep < 0) return 0.0 * x;  // |x| < 10**-ndigits / 10: under half a unit
  const auto k = static_cast<std::size_t>(keep);
  std::string kept = "0" + digits.substr(0, k);  // a leading 0 takes a carry
  const char next = k < digits.size() ? digits[k] : '0';
  const bool beyond = k + 1 < digits.size() && digits.find_first_not_of('0', k + 1) != std::string::npos;
  const bool odd = (kept.back() - '0') % 2 == 1;
  if (next > '5' || (next == '5' && (beyond || odd))) {
    std::size_t i = kept.size();
    while (kept[--i] == '9') kept[i] = '0';
    ++kept[i];
  }
  kept += "e" + std::to_string(-ndigits);
  // strtod reads digits and an exponent alike in every locale, and a subnormal result as it is.
  const double r = std::strtod(kept.c_str(), nullptr);
  if (std::isinf(r)) return std::nullopt;  // rounded up past 1.8e308
  return std::copysign(r, x);
}

std::optional<std::int64_t> py_round(std::int64_t i, std::int64_t ndigits) {
  if (ndigits >= 0) return i;
  if (ndigits < -38) return 0;  // 10**38 is past 2 x INT64_MAX: every int64 is under half a unit
  __int128 unit = 1;
  for (std::int64_t n = 0; n < -ndigits; ++n) unit *= 10;
  // Floor division, then the nearer multiple (ties to the even quotient), as CPython's divmod_near.
  __int128 q = i / unit, r = i % unit;
  if (r < 0) {
    --q;
    r += unit;
  }
  if (2 * r > unit || (2 * r == unit && (q & 1) != 0)) ++q;
  const __int128 out = q * unit;
  if (out < INT64_MIN || out > INT64_MAX) return std::nullopt;
  return static_cast<std::int64_t>(out);
}

}  // namespace ctune::tmpl
