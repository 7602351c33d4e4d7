// The parsed template: expressions and statements, each with its source position for errors.
// Built by parser.cpp, walked by render.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ctune::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    list,      // items
    tuple,     // items
    dict,      // items: key, value, key, value ...
    attr,      // items[0] . name
    item,      // items[0] [ items[1] ]
    slice,     // items[0] [ items[1] : items[2] : items[3] ] (null parts absent)
    call,      // items[0] ( items[1..] , kwargs )
    filter,    // items[0] | name ( items[1..], kwargs ); items[0] null in {% filter %}
    test,      // items[0] is [not] name ( items[1..] ); negated
    unary,     // name ("-", "+", "not") items[0]
    binary,    // items[0] name items[1]: + - * / // % ** ~ and or
    compare,   // items[0] ops[k] items[k+1] ...
    cond,      // items[1] if items[0] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0, column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> items;  // may hold nulls where a part is absent (slices, cond)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // compare operators: == != < <= > >= in notin
  bool negated = false;          // test: `is not`
  int height = 1;                // levels of the tree below and including this node (parser.cpp bounds it)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Macro {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default null when required
  Body body;
};

struct Node {
  enum class Kind {
    text,        // text
    output,      // {{ expr }}
    if_,         // branches: (condition, body)...; else_body
    for_,        // targets in expr [if filter]: body, else_body
    set,         // targets (or ns.attr in attr) = expr
    set_block,   // {% set x %}body{% endset %} (filter applied when present)
    macro,       // macro
    call_block,  // {% call(params) expr %}body{% endcall %}
    filter_block,  // {% filter f %}body{% endfilter %}
    generation,  // {% generation %}body{% endgeneration %}
    scope,       // {% with %}: body in its own scope
    break_,
    continue_,
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr;     // output, for iterable, set value, call expression, filter chain
  ExprPtr filter;   // for ... if filter; set_block filter
  std::vector<std::string> targets;  // for/set names; set: one target with attr for ns.attr
  std::string attr;                  // set ns.attr
  bool tuple_target = false;         // for a, b in ...
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::shared_ptr<Macro> macro;      // macro and call_block (the caller's params and body)
};

}  // namespace ctune::tmpl
