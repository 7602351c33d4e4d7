// Python's int() and float() of a str, as Jinja2's int and float filters call them: what Python
// accepts (surrounding whitespace, a sign, single underscores between digits, any Unicode decimal
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

}  // namespace ctune::tmpl
