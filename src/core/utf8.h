// UTF-8 well-formedness, one rule for every reader of text a user hands ctune (recipes and
// overrides, chat templates, tokenizer files, text to encode): the Unicode standard's
// well-formed byte sequences (Unicode 15, table 3-7), so no overlong forms, no surrogates
// (U+D800..U+DFFF) and nothing past U+10FFFF, which is also what Python's and Rust's strict
// decoders accept.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ctune {

// Offset of the first byte that is not part of valid UTF-8, or npos when all of `s` is valid.
std::size_t find_invalid_utf8(std::string_view s);

// `s` with every invalid sequence replaced by U+FFFD (Rust's String::from_utf8_lossy rules:
// one replacement per maximal invalid prefix).
std::string repair_utf8(std::string_view s);

}  // namespace ctune
