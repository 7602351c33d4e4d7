// Recursive-descent parser for the template grammar; see parser.h. The structure mirrors
// Jinja2's own parser (parse_condexpr ... parse_unary, parse_postfix, parse_filter_expr) so
// that precedence and the places where tuples are allowed agree with it.
#include "template/parser.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "template/pystr.h"

namespace ctune::tmpl {

namespace {

// A number token's digits: Python allows 1_000.
std::string without_underscores(const std::string& token) {
  std::string digits;
  for (char c : token)
    if (c != '_') digits += c;
  return digits;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body run() {
    Body body = parse_body({});
    if (cur().type != Tok::eof) fail("unexpected tag");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == Tok::name && cur().value == name; }

  [[noreturn]] void fail(const std::string& what) const { fail_at(cur(), what); }
  [[noreturn]] static void fail_at(const Token& tok, const std::string& what) {
    throw TemplateError("template line " + std::to_string(tok.line) + ", column " + std::to_string(tok.column) + ": " + what);
  }

  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case Tok::eof: return "end of template";
      case Tok::block_end: return "end of statement block";
      case Tok::var_end: return "end of print statement";
      case Tok::text: return "template text";
      default: return "'" + tok.value + "'";
    }
  }

  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) fail("expected a name, found " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::block_end) fail("expected end of statement block, found " + describe(cur()));
    next();
  }

  template <class T>
  static std::unique_ptr<T> at(const Token& tok, typename T::Kind kind) {
    auto n = std::make_unique<T>();
    n->kind = kind;
    n->line = tok.line;
    n->column = tok.column;
    return n;
  }

  // Statements until a block whose first name is in `ends` (left unconsumed, positioned on the name).
  Body parse_body(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::eof) {
        if (!ends.empty()) fail("unexpected end of template, expected '" + ends.front() + "'");
        return body;
      }
      if (tok.type == Tok::text) {
        auto n = at<Node>(tok, Node::Kind::text);
        n->text = tok.value;
        body.push_back(std::move(n));
        next();
      } else if (tok.type == Tok::var_begin) {
        next();
        auto n = at<Node>(tok, Node::Kind::output);
        n->expr = parse_tuple(false, true);
        if (cur().type != Tok::var_end) fail("expected end of print statement, found " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (tok.type == Tok::block_begin) {
        next();
        if (cur().type != Tok::name) fail("expected a statement name, found " + describe(cur()));
        for (const auto& e : ends)
          if (cur().value == e) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  void end_tag(const char* name) {
    if (!is_name(name)) fail(std::string("expected '") + name + "', found " + describe(cur()));
    next();
    expect_block_end();
  }

  NodePtr parse_statement() {
    const Depth guard(*this);
    const Token& tok = cur();
    const std::string& w = tok.value;
    if (w == "if") return parse_if();
    if (w == "for") return parse_for();
    if (w == "set") return parse_set();
    if (w == "macro") return parse_macro();
    if (w == "call") return parse_call_block();
    if (w == "filter") return parse_filter_block();
    if (w == "generation") {
      next();
      expect_block_end();
      auto n = at<Node>(tok, Node::Kind::generation);
      n->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return n;
    }
    if (w == "with") return parse_with();
    if (w == "break" || w == "continue") {
      next();
      expect_block_end();
      if (loops_ == 0) fail_at(tok, "'" + w + "' outside of a loop");
      return at<Node>(tok, w == "break" ? Node::Kind::break_ : Node::Kind::continue_);
    }
    if (w == "include" || w == "import" || w == "from" || w == "extends" || w == "block")
      fail("'" + w + "' is not available: chat templates are rendered without a loader, as in transformers");
    fail("unknown tag '" + w + "'");
  }

  NodePtr parse_if() {
    auto n = at<Node>(cur(), Node::Kind::if_);
    next();
    while (true) {
      ExprPtr cond = parse_tuple(false, false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (is_name("elif")) {
        next();
        continue;
      }
      if (is_name("else")) {
        next();
        expect_block_end();
        n->else_body = parse_body({"endif"});
      }
      end_tag("endif");
      return n;
    }
  }

  NodePtr parse_for() {
    auto n = at<Node>(cur(), Node::Kind::for_);
    next();
    n->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      n->tuple_target = true;
      if (is_name("in")) break;
      n->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail("expected 'in', found " + describe(cur()));
    next();
    n->expr = parse_tuple(false, /*with_condexpr=*/false);
    if (is_name("if")) {
      next();
      n->filter = parse_expression();
    }
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loops_;
    n->body = parse_body({"else", "endfor"});
    --loops_;
    if (is_name("else")) {
      next();
      expect_block_end();
      const int saved = loops_;
      loops_ = 0;  // break/continue in a for-else belong to an outer loop only
      n->else_body = parse_body({"endfor"});
      loops_ = saved;
    }
    end_tag("endfor");
    return n;
  }

  NodePtr parse_set() {
    const Token& tok = cur();
    next();
    std::string first = expect_name();
    if (is_op(".")) {  // namespace attribute
      next();
      auto n = at<Node>(tok, Node::Kind::set);
      n->targets.push_back(first);
      n->attr = expect_name();
      expect_op("=");
      n->expr = parse_tuple(false, true);
      expect_block_end();
      return n;
    }
    std::vector<std::string> targets{first};
    bool tuple = false;
    while (is_op(",")) {
      next();
      tuple = true;
      if (is_op("=")) break;
      targets.push_back(expect_name());
    }
    if (is_op("=")) {
      next();
      auto n = at<Node>(tok, Node::Kind::set);
      n->targets = std::move(targets);
      n->tuple_target = tuple;
      n->expr = parse_tuple(false, true);
      expect_block_end();
      return n;
    }
    if (tuple) fail("expected '=', found " + describe(cur()));
    auto n = at<Node>(tok, Node::Kind::set_block);
    n->targets = std::move(targets);
    if (is_op("|")) n->filter = parse_filters(nullptr);
    expect_block_end();
    n->body = parse_body({"endset"});
    end_tag("endset");
    return n;
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr dflt;
      if (is_op("=")) {
        next();
        dflt = parse_expression();
      } else if (!params.empty() && params.back().second) {
        fail("non-default argument follows default argument");
      }
      params.emplace_back(std::move(name), std::move(dflt));
    }
    next();
    return params;
  }

  NodePtr parse_macro() {
    auto n = at<Node>(cur(), Node::Kind::macro);
    next();
    n->macro = std::make_shared<Macro>();
    n->macro->name = expect_name();
    n->macro->params = parse_params();
    expect_block_end();
    const int saved = loops_;
    loops_ = 0;
    n->macro->body = parse_body({"endmacro"});
    loops_ = saved;
    end_tag("endmacro");
    return n;
  }

  NodePtr parse_call_block() {
    auto n = at<Node>(cur(), Node::Kind::call_block);
    next();
    n->macro = std::make_shared<Macro>();
    n->macro->name = "caller";
    if (is_op("(")) n->macro->params = parse_params();
    n->expr = parse_expression();
    if (n->expr->kind != Expr::Kind::call) fail_at(cur(), "expected a call after 'call'");
    expect_block_end();
    const int saved = loops_;
    loops_ = 0;
    n->macro->body = parse_body({"endcall"});
    loops_ = saved;
    end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = at<Node>(cur(), Node::Kind::filter_block);
    next();
    n->filter = parse_filter_chain(nullptr, /*first_has_pipe=*/false);
    expect_block_end();
    n->body = parse_body({"endfilter"});
    end_tag("endfilter");
    return n;
  }

  // {% with a = 1, b = 2 %}...{% endwith %}: a scope whose first statements are the assignments.
  NodePtr parse_with() {
    auto n = at<Node>(cur(), Node::Kind::scope);
    next();
    while (cur().type != Tok::block_end) {
      if (!n->body.empty()) expect_op(",");
      auto s = at<Node>(cur(), Node::Kind::set);
      s->targets.push_back(expect_name());
      expect_op("=");
      s->expr = parse_expression();
      n->body.push_back(std::move(s));
    }
    expect_block_end();
    Body inner = parse_body({"endwith"});
    end_tag("endwith");
    for (auto& x : inner) n->body.push_back(std::move(x));
    return n;
  }

  // Expressions.
  ExprPtr parse_tuple(bool explicit_parens_ok, bool with_condexpr) {
    const Token& tok = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end()) break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens_ok) fail("expected an expression, found " + describe(cur()));
    }
    auto n = at<Expr>(tok, Expr::Kind::tuple);
    for (auto& item : items) attach(*n, std::move(item));
    return n;
  }

  bool tuple_end() const {
    return cur().type == Tok::var_end || cur().type == Tok::block_end || cur().type == Tok::eof || is_op(")") ||
           is_name("in") || is_name("if") || is_op("=");
  }

  ExprPtr parse_expression() { return parse_condexpr(); }

  ExprPtr parse_condexpr() {
    const Token& tok = cur();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      auto n = at<Expr>(tok, Expr::Kind::cond);
      attach(*n, parse_or());
      attach(*n, std::move(e));
      if (is_name("else")) {
        next();
        const Depth guard(*this);  // `a if b else c if d else ...` recurses once per else
        attach(*n, parse_condexpr());
      } else {
        attach(*n, nullptr);
      }
      e = std::move(n);
    }
    return e;
  }

  ExprPtr binary(const Token& tok, std::string op, ExprPtr a, ExprPtr b) {
    auto n = at<Expr>(tok, Expr::Kind::binary);
    n->name = std::move(op);
    attach(*n, std::move(a));
    attach(*n, std::move(b));
    return n;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& tok = cur();
      next();
      e = binary(tok, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& tok = cur();
      next();
      e = binary(tok, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Depth guard(*this);
      auto n = at<Expr>(cur(), Expr::Kind::unary);
      next();
      n->name = "not";
      attach(*n, parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& tok = cur();
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::name && peek().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = at<Expr>(tok, Expr::Kind::compare);
        attach(*cmp, std::move(e));
      }
      cmp->ops.push_back(op);
      attach(*cmp, parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& tok = cur();
      std::string op = tok.value;
      next();
      e = binary(tok, op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& tok = cur();
      next();
      e = binary(tok, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& tok = cur();
      std::string op = tok.value;
      next();
      e = binary(tok, op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& tok = cur();
      next();
      e = binary(tok, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Depth guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = at<Expr>(cur(), Expr::Kind::unary);
      e->name = cur().value;
      next();
      attach(*e, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    if (tok.type == Tok::name) {
      next();
      auto n = at<Expr>(tok, Expr::Kind::literal);
      if (tok.value == "true" || tok.value == "True") n->value = Value(true);
      else if (tok.value == "false" || tok.value == "False") n->value = Value(false);
      else if (tok.value == "none" || tok.value == "None") n->value = Value::none();
      else {
        n->kind = Expr::Kind::name;
        n->name = tok.value;
      }
      return n;
    }
    if (tok.type == Tok::string) {
      auto n = at<Expr>(tok, Expr::Kind::literal);
      std::string s;
      while (cur().type == Tok::string) {
        s += cur().value;
        next();
      }
      n->value = Value(std::move(s));
      return n;
    }
    if (tok.type == Tok::integer || tok.type == Tok::floating) {
      next();
      auto n = at<Expr>(tok, Expr::Kind::literal);
      const std::string digits = without_underscores(tok.value);
      if (tok.type == Tok::floating) {
        // strtod, not stod: a literal beyond double's range is inf (or 0), as Python's float()
        // reads it, where stod throws.
        n->value = Value(std::strtod(digits.c_str(), nullptr));
      } else {
        int base = 10;
        std::size_t skip = 0;
        if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'b' || digits[1] == 'o' || digits[1] == 'x')) {
          base = digits[1] == 'b' ? 2 : digits[1] == 'o' ? 8 : 16;
          skip = 2;
        }
        std::int64_t v = 0;
        auto r = std::from_chars(digits.data() + skip, digits.data() + digits.size(), v, base);
        if (r.ec != std::errc()) fail_at(tok, "integer literal " + tok.value + " is out of range");
        n->value = Value(v);
      }
      return n;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto n = at<Expr>(tok, Expr::Kind::list);
      next();
      while (!is_op("]")) {
        if (!n->items.empty()) expect_op(",");
        if (is_op("]")) break;
        attach(*n, parse_expression());
      }
      next();
      return n;
    }
    if (is_op("{")) {
      auto n = at<Expr>(tok, Expr::Kind::dict);
      next();
      while (!is_op("}")) {
        if (!n->items.empty()) expect_op(",");
        if (is_op("}")) break;
        attach(*n, parse_expression());
        expect_op(":");
        attach(*n, parse_expression());
      }
      next();
      return n;
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& tok = cur();
      if (is_op(".")) {
        next();
        if (cur().type == Tok::name) {
          auto n = at<Expr>(tok, Expr::Kind::attr);
          n->name = cur().value;
          next();
          attach(*n, std::move(e));
          e = std::move(n);
        } else if (cur().type == Tok::integer) {
          auto n = at<Expr>(tok, Expr::Kind::item);
          auto idx = at<Expr>(cur(), Expr::Kind::literal);
          const std::string digits = without_underscores(cur().value);  // 1_0 is 10, as in Python
          if (!is_decimal(digits)) fail("expected a decimal index after '.', found " + cur().value);
          idx->value = Value(saturated_index(digits));
          next();
          attach(*n, std::move(e));
          attach(*n, std::move(idx));
          e = std::move(n);
        } else {
          fail("expected an attribute name after '.', found " + describe(cur()));
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(tok, std::move(e));
      } else if (is_op("(")) {
        e = parse_call(tok, std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(const Token& tok, ExprPtr target) {
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression();
    while (is_op(":") && colons < 2) {
      next();
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) {
      auto n = at<Expr>(tok, Expr::Kind::item);
      attach(*n, std::move(target));
      attach(*n, std::move(parts[0]));
      return n;
    }
    auto n = at<Expr>(tok, Expr::Kind::slice);
    attach(*n, std::move(target));
    for (auto& p : parts) attach(*n, std::move(p));
    return n;
  }

  // ( args, kw=value ) appended to `n` (items after the existing ones, kwargs).
  void parse_call_args(Expr& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::name && peek().type == Tok::op && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        attach_kwarg(n, std::move(key), parse_expression());
      } else {
        if (!n.kwargs.empty()) fail("positional argument follows keyword argument");
        attach(n, parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(const Token& tok, ExprPtr callee) {
    auto n = at<Expr>(tok, Expr::Kind::call);
    n->line = callee->line;  // errors point at what is called, not at its '('
    n->column = callee->column;
    attach(*n, std::move(callee));
    parse_call_args(*n);
    return n;
  }

  ExprPtr parse_filter_chain(ExprPtr e, bool first_has_pipe) {
    bool first = true;
    while (true) {
      if (!(first && !first_has_pipe)) {
        if (!is_op("|")) return e;
        next();
      }
      first = false;
      const Token& tok = cur();
      std::string name = expect_name();
      while (is_op(".")) {
        next();
        name += "." + expect_name();
      }
      auto n = at<Expr>(tok, Expr::Kind::filter);
      n->name = std::move(name);
      attach(*n, std::move(e));
      if (is_op("(")) parse_call_args(*n);
      e = std::move(n);
    }
  }
  ExprPtr parse_filters(ExprPtr e) { return parse_filter_chain(std::move(e), true); }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), true);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(cur(), std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr e) {
    auto n = at<Expr>(cur(), Expr::Kind::test);
    next();
    if (is_name("not")) {
      n->negated = true;
      next();
    }
    n->name = expect_name();
    while (is_op(".")) {
      next();
      n->name += "." + expect_name();
    }
    attach(*n, std::move(e));
    const Tok ty = cur().type;
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((ty == Tok::name || ty == Tok::string || ty == Tok::integer || ty == Tok::floating || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      attach(*n, parse_postfix(parse_primary()));
    }
    return n;
  }

  // Nesting bound: the parser and the renderer recurse once per level, so a template of a
  // million '(' must be refused, not overflow the stack. Real chat templates nest < 20 deep.
  static constexpr int kMaxNesting = 100;
  // Height bound: chains the parser builds in a loop (`x|f|f...`, `a.b.c...`, `1 + 1 + ...`)
  // make trees the renderer (and the tree's destructor) recurse down level by level, so their
  // height is bounded where each node is built. Jinja2 itself fails past about 300 levels
  // (Python's recursion limit); real chat templates stay under 20.
  static constexpr int kMaxHeight = 256;

  void attach(Expr& parent, ExprPtr child) {
    if (child) grow(parent, child->height + 1);
    parent.items.push_back(std::move(child));
  }
  void attach_kwarg(Expr& parent, std::string key, ExprPtr value) {
    grow(parent, value->height + 1);
    parent.kwargs.emplace_back(std::move(key), std::move(value));
  }
  void grow(Expr& parent, int height) const {
    if (height <= parent.height) return;
    // Refused before the child joins: the caller's unique_ptrs free the tree, at most this deep.
    if (height > kMaxHeight)
      fail("expression nested deeper than " + std::to_string(kMaxHeight) +
           " levels (a chain of filters, attributes, calls or operators)");
    parent.height = height;
  }

  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) p.fail("expressions or blocks nested deeper than " + std::to_string(kMaxNesting));
    }
    ~Depth() { --p.nesting_; }
  };

  const std::vector<Token>& t_;
  std::size_t i_ = 0;
  int loops_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace ctune::tmpl
