// Template source -> tokens, with Jinja2's whitespace rules as Hugging Face configures them
// (trim_blocks and lstrip_blocks on, keep_trailing_newline off):
//   - line breaks \r\n and \r become \n, and one trailing line break of the source is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after;
//   - trim_blocks: the first \n after a block or comment tag is dropped (not after `+%}`);
//   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag are
//     dropped (not before `{%+`), "start of a line" including right after a trimmed tag;
//   - `{% raw %}...{% endraw %}` is text.
// Inside a tag, `}}`/`%}` only end it when brackets are balanced (`{{ {'a': 1} }}`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune::tmpl {

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok type;
  std::string value;  // text, name, decoded string literal, number source, operator
  int line = 1, column = 1;
};

// TemplateError (with line and column) for an unterminated tag, comment, string or raw block,
// an unexpected character or unbalanced brackets.
std::vector<Token> lex(const std::string& source);

// Line and column (1-based, column in code points) of byte `offset` of `source`.
void position_of(const std::string& source, std::size_t offset, int& line, int& column);

}  // namespace ctune::tmpl
