// Python's int() and float() of a str, as Jinja2's int and float filters call them, and Python's
// round() as its round filter calls it. int() and float() accept what Python (surrounding whitespace, a sign, single underscores between digits, any Unicode decimal
// digit, 0x/0o/0b prefixes, inf and nan) and nothing more. C's strtoll and strtod accept hex
// floats, "0x" in base 10 and nan(...), and refuse underscores.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ctune::tmpl {

// int(s, base) for 2 <= base <= 36, or base 0 (the prefix decides; no leading zeros). nullopt
// where Python raises ValueError (an invalid base included). `beyond_64_bits` is set for a valid
// number an int64 cannot hold: Python's ints are unbounded, the engine's are not.
std::optional<std::int64_t> py_int(std::string_view s, std::int64_t base, bool& beyond_64_bits);

// float(s): nullopt where Python raises ValueError. Beyond double's range is +-inf, as in Python.
std::optional<double> py_float(std::string_view s);

// round(x, ndigits) of a float as CPython computes it: the exact binary value rounded to ndigits
// decimals, half to even, then read back; x itself past 323 digits (no double has more), a zero
// of x's sign before -308; nullopt where that is past double's range (Python's OverflowError).
// Scaling by 10**ndigits instead gave nan for round(1.5, 10**9).
std::optional<double> py_round(double x, std::int64_t ndigits);
// round(i, ndigits) of an int: i itself for ndigits >= 0, else the nearest multiple of
// 10**-ndigits, half to even; nullopt when that is beyond 64 bits (Python's ints grow).
std::optional<std::int64_t> py_round(std::int64_t i, std::int64_t ndigits);

}  // namespace ctune::tmpl
