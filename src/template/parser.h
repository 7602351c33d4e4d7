// Tokens -> statements and expressions, with Jinja2's grammar and operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then postfix . [] () and filters `|f` and tests `is t`.
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples,
// namespace attributes, block set), macro, call, filter, generation, break, continue, with.
#pragma once

#include <string>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace ctune::tmpl {

// TemplateError "template line L, column C: ..." for any syntax error.
Body parse(const std::vector<Token>& tokens);

}  // namespace ctune::tmpl
