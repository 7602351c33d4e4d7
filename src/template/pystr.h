// Python's str operations as chat templates call them (`content.strip()`, `.split('</think>')`,
// `|upper`, `s[::-1]`, `len(s)`), on valid UTF-8 with code-point indices, because the templates
// run on Python strings in transformers. Whitespace is str.isspace()'s set; case mapping is
// Unicode's simple mapping (utf8proc), which differs from Python's full mapping only for the
// few characters that expand (German sharp s upper-cases to "SS" in Python, stays one here).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctune::tmpl {

// Decodes the code point at s[i] (valid UTF-8) and advances i.
std::uint32_t decode_code_point(std::string_view s, std::size_t& i);
void append_code_point(std::string& out, std::uint32_t cp);
std::size_t code_point_count(std::string_view s);
// Byte offsets of every code point boundary, including s.size() at the end (size count+1).
std::vector<std::size_t> code_point_offsets(std::string_view s);

bool is_py_space(std::uint32_t cp);  // str.isspace()
bool is_printable(std::uint32_t cp);  // str.isprintable(), as repr() decides what to escape

// strip/lstrip/rstrip: without `chars`, Python whitespace; with it, any of its code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars = std::nullopt, bool left = true,
                     bool right = true);
// str.split(sep, maxsplit) / str.rsplit: no sep splits on whitespace runs and drops empties.
// `sep` must not be empty (the caller refuses it, as Python does).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                                  bool from_right = false);
// Calls `line` with each line of `s` as str.splitlines(keepends) splits it, in order, without
// building the list: indent and the splitlines method bound what they build from it.
void for_each_line(std::string_view s, bool keepends, const std::function<void(std::string_view)>& line);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count);
// The size py_replace's result will have, found without building it (a 30 MB replacement of each
// of 10^6 matches would be 30 TB).
std::uint64_t py_replace_size(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count);
// s reversed by code points (Jinja2's reverse of a str).
std::string py_reversed(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
// str.find / rfind / count / startswith / endswith within s[start:end] (code points; absent bounds
// are the whole string). Python's rules at the edges: a window that starts past the end finds
// nothing, not even '' ('abc'.find('', 10) is -1, 'abc'.startswith('', 4) is False).
std::int64_t py_find(std::string_view s, std::string_view sub, bool from_right, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end);  // code-point index, -1 when absent
std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end);
bool py_tailmatch(std::string_view s, std::string_view sub, bool at_end, std::optional<std::int64_t> start,
                  std::optional<std::int64_t> end);
// str.isdigit/isalpha/isalnum/islower/isupper/isspace by Unicode category.
bool py_is(std::string_view s, std::string_view what);
// Matches of Python's re \w+ (runs of '_' and of characters str.isalnum() accepts): Jinja2's wordcount.
std::size_t py_word_count(std::string_view s);

// Non-empty ASCII digits only (Python's str.isdigit() for what a template writes as an index).
bool is_decimal(std::string_view s);
// The index `digits` (is_decimal) names, INT64_MAX beyond 64 bits: past the end of any list,
// so the item is undefined, as in Jinja2.
std::int64_t saturated_index(std::string_view digits);

// Python's slice semantics over `n` items: fills the indices selected by [start:stop:step].
std::vector<std::size_t> slice_indices(std::size_t n, std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                                       std::int64_t step);

}  // namespace ctune::tmpl
