// The renderer: walks the parsed template with Jinja2's scoping (a for-loop iteration and a
// macro call are scopes, if-blocks are not; `set` writes to the innermost scope, so only a
// namespace carries values out of a loop) and the sandbox's bounds. See template.h.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <variant>

#include "core/error.h"
#include "core/utf8.h"
#include "template/ast.h"
#include "template/builtin_args.h"
#include "template/builtins.h"
#include "template/lexer.h"
#include "template/parser.h"
#include "template/pystr.h"
#include "template/template.h"

namespace ctune::tmpl {

struct Program {
  std::string source;
  Body body;
  bool has_generation = false;
};

namespace {


struct Frame;
using FramePtr = std::shared_ptr<Frame>;
struct Frame {
  FramePtr parent;
  std::unordered_map<std::string, Value> vars;
  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { normal, break_, continue_ };

[[noreturn]] void fail(const std::string& what) { throw EvalError(what); }

// Every operation checks its operands' kinds and names them in its error; a value read as a kind
// it is not (a check missed) still ends as one located TemplateError, not std::bad_variant_access.
constexpr const char* kWrongKind = "a value of an unexpected type (an engine bug: please report the template)";

std::string where(int line, int column) {
  return "template line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

// The most of a failure's own text an error line shows.
constexpr std::size_t kMessageBytes = 1024;

// The error of a failure at a template position. Its text can be the template's own
// (raise_exception) or the data's, of any length and holding anything: what a terminal would obey
// (escape sequences, line breaks) is escaped, and it is cut at kMessageBytes (a 10 MB message was
// one 10 MB line on the terminal).
TemplateError located(int line, int column, std::string_view what) {
  return TemplateError(where(line, column) + printable_excerpt(what, kMessageBytes));
}

bool walk_has_generation(const Body& body) {
  for (const auto& n : body) {
    if (n->kind == Node::Kind::generation) return true;
    if (walk_has_generation(n->body) || walk_has_generation(n->else_body)) return true;
    for (const auto& [c, b] : n->branches)
      if (walk_has_generation(b)) return true;
    if (n->macro && walk_has_generation(n->macro->body)) return true;
  }
  return false;
}

class Renderer final : public Env {
 public:
  Renderer(const Program& program, const RenderOptions& options) : program_(program), options_(options) {
    now_ = options.now ? *options.now : std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  }

  Rendered run(const Dict& variables) {
    stack_base_ = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    auto globals = std::make_shared<Frame>();
    Dict builtins;
    add_globals(builtins, *this);
    for (const auto& [k, v] : builtins.items()) globals->vars[k] = v;
    for (const auto& [k, v] : variables.items()) globals->vars[k] = v;
    root_ = &result_.text;
    exec(program_.body, globals, result_.text);
    return std::move(result_);
  }

  // Env
  Value filter(const std::string& name, const Value& v, Args& args) override {
    charge(weight(v) + weight(args));
    auto r = apply_filter(*this, name, v, args);
    if (!r) fail("no filter named '" + name + "'");
    charge(weight(*r));
    return std::move(*r);
  }
  bool test(const std::string& name, const Value& v, Args& args) override {
    charge(weight(v) + weight(args));
    auto r = apply_test(*this, name, v, args);
    if (!r) fail("no test named '" + name + "'");
    return *r;
  }
  void charge(std::uint64_t units) override {
    work_ += units;
    if (work_ > options_.limits.max_work)
      fail("the render's work exceeds its limit of " + std::to_string(options_.limits.max_work) +
           " (bytes and items read and built by its operations)");
  }
  Value call(const Value& callee, Args& args) override {
    if (callee.is_undefined())
      fail(callee.undefined_message());
    if (!callee.is_function()) fail("'" + callee.type_name() + "' object is not callable");
    charge(weight(args));
    Value out = callee.function().call(args);
    check_size(*this, out);
    charge(weight(out));
    return out;
  }
  const Limits& limits() const override { return options_.limits; }
  std::time_t now() const override { return now_; }
  void adopt(const NamespacePtr& ns) override {
    if (namespaces_.size() >= prune_at_) {  // a loop can make 10^6: keep only the live ones
      namespaces_.erase(std::remove_if(namespaces_.begin(), namespaces_.end(), [](const auto& w) { return w.expired(); }),
                        namespaces_.end());
      prune_at_ = 2 * namespaces_.size() + 64;
    }
    namespaces_.push_back(ns);
  }

  ~Renderer() override {
    for (const auto& weak : namespaces_)
      if (const NamespacePtr ns = weak.lock()) ns->attrs = Dict();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

 private:
  void write(std::string& out, std::string_view s) {
    charge(s.size());
    if (s.size() > options_.limits.max_output_bytes - out.size())
      fail("the rendered text exceeds the output limit of " + std::to_string(options_.limits.max_output_bytes) + " bytes");
    out.append(s);
  }

  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const auto& node : body) {
      const Flow f = exec_node(*node, frame, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  // Each bound holds alone (macro calls 100 deep, expressions 256 high, blocks 100 deep), but
  // their product does not: a macro recursing 100 deep through a 250-level expression overflowed
  // the stack (found by fuzzing). So the render's own recursion is bounded too, in levels and in
  // the stack those levels take, since a level's frames differ by build (a fraction of a KB
  // optimised, several KB under AddressSanitizer). Real templates, recursive macros over a
  // tool's JSON schema included, stay under 100 levels.
  static constexpr int kMaxRenderDepth = 2000;
  static std::uintptr_t stack_budget() {
    static const std::uintptr_t budget = [] {
      std::uintptr_t b = 4u << 20;  // half of Linux's default 8 MiB stack
      rlimit limit{};
      if (getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        b = std::min<std::uintptr_t>(b, static_cast<std::uintptr_t>(limit.rlim_cur) / 2);
      return b;
    }();
    return budget;
  }
  struct Descent {
    Renderer& r;
    Descent(Renderer& renderer, int line, int column) : r(renderer) {
      const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
      const std::uintptr_t used = r.stack_base_ > here ? r.stack_base_ - here : 0;
      if (++r.render_depth_ > kMaxRenderDepth || used > stack_budget()) {
        const int levels = r.render_depth_--;
        throw TemplateError(where(line, column) + "the render nests too deep (" + std::to_string(levels) +
                            " levels: macro calls times the expressions and blocks inside them)");
      }
    }
    ~Descent() { --r.render_depth_; }
    Descent(const Descent&) = delete;
    Descent& operator=(const Descent&) = delete;
  };

  Flow exec_node(const Node& n, const FramePtr& frame, std::string& out) {
    const Descent descent(*this, n.line, n.column);
    try {
      return exec_node_unchecked(n, frame, out);
    } catch (const EvalError& e) {
      throw located(n.line, n.column, e.what());
    } catch (const std::bad_variant_access&) {
      throw TemplateError(where(n.line, n.column) + kWrongKind);
    }
  }

  Flow exec_node_unchecked(const Node& n, const FramePtr& frame, std::string& out) {
    switch (n.kind) {
      case Node::Kind::text: write(out, n.text); return Flow::normal;
      case Node::Kind::output: write(out, eval(*n.expr, frame).str(*this)); return Flow::normal;
      case Node::Kind::if_:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond, frame).truthy()) return exec(body, frame, out);
        return exec(n.else_body, frame, out);
      case Node::Kind::for_: return exec_for(n, frame, out);
      case Node::Kind::set: exec_set(n, frame); return Flow::normal;
      case Node::Kind::set_block: {
        std::string captured;
        exec(n.body, std::make_shared<Frame>(Frame{frame, {}}), captured);
        Value v(std::move(captured));
        if (n.filter) v = apply_chain(*n.filter, v, frame);
        frame->vars[n.targets[0]] = v;
        return Flow::normal;
      }
      case Node::Kind::macro: frame->vars[n.macro->name] = make_macro(n.macro, frame, Value()); return Flow::normal;
      case Node::Kind::call_block: {
        const Value caller = make_macro(n.macro, frame, Value());
        const Expr& call = *n.expr;
        Args args = eval_args(call, frame, 1);
        args.kw.emplace_back("caller", caller);
        write(out, this->call(eval(*call.items[0], frame), args).str(*this));
        return Flow::normal;
      }
      case Node::Kind::filter_block: {
        std::string captured;
        exec(n.body, frame, captured);
        write(out, apply_chain(*n.filter, Value(std::move(captured)), frame).str(*this));
        return Flow::normal;
      }
      case Node::Kind::generation: {
        const std::size_t begin = out.size();
        const Flow f = exec(n.body, frame, out);
        if (&out == root_ && out.size() > begin) result_.generation.emplace_back(begin, out.size());
        return f;
      }
      case Node::Kind::scope: return exec(n.body, std::make_shared<Frame>(Frame{frame, {}}), out);
      case Node::Kind::break_: return Flow::break_;
      case Node::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  // A filter chain parsed with a null innermost operand ({% filter %}, block set) applied to `v`.
  Value apply_chain(const Expr& chain, const Value& v, const FramePtr& frame) {
    if (chain.kind != Expr::Kind::filter) return v;
    const Value inner = chain.items[0] ? apply_chain(*chain.items[0], v, frame) : v;
    Args args = eval_args(chain, frame, 1);
    return filter(chain.name, inner, args);
  }

  static void assign(Frame& frame, const Node& n, const Value& v) {
    if (!n.tuple_target) {
      frame.vars[n.targets[0]] = v;
      return;
    }
    if (!v.is_list()) fail("cannot unpack a non-sequence " + v.type_name());
    if (v.list().size() != n.targets.size())
      fail("expected " + std::to_string(n.targets.size()) + " values to unpack, found " + std::to_string(v.list().size()));
    for (std::size_t i = 0; i < n.targets.size(); ++i) frame.vars[n.targets[i]] = v.list()[i];
  }

  void exec_set(const Node& n, const FramePtr& frame) {
    Value v = eval(*n.expr, frame);
    if (!n.attr.empty()) {
      const Value* target = frame->find(n.targets[0]);
      if (!target || !target->is_namespace()) fail("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
      target->ns().attrs.set(n.attr, std::move(v));
      return;
    }
    assign(*frame, n, v);
  }

  Flow exec_for(const Node& n, const FramePtr& frame, std::string& out) {
    List items = builtin::iterate(*this, eval(*n.expr, frame));
    charge(weight(items));  // the copy iterate made
    if (n.filter) {
      List kept;
      for (const Value& item : items) {
        auto scope = std::make_shared<Frame>(Frame{frame, {}});
        assign(*scope, n, item);
        if (eval(*n.filter, scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    // Jinja2 runs the else block unless some iteration reached the end of the body: an
    // iteration left by continue or break does not count (its generated code clears the flag
    // at the body's end).
    bool completed = false;
    const auto length = static_cast<std::int64_t>(items.size());
    // One loop.cycle for the whole loop, reading the current index.
    auto index = std::make_shared<std::int64_t>(0);
    const Value cycle(std::make_shared<Function>(Function{"loop.cycle", [index](Args& a) {
                                                   if (a.pos.empty()) fail("no items for cycling given");
                                                   return a.pos[static_cast<std::size_t>(*index) % a.pos.size()];
                                                 }}));
    for (std::int64_t i = 0; i < length; ++i) {
      *index = i;
      if (++iterations_ > options_.limits.max_iterations)
        fail("more than " + std::to_string(options_.limits.max_iterations) + " loop iterations in one render");
      auto scope = std::make_shared<Frame>(Frame{frame, {}});
      assign(*scope, n, items[static_cast<std::size_t>(i)]);
      auto loop = std::make_shared<Dict>();
      loop->reserve(12);
      loop->append("index", Value(i + 1));
      loop->append("index0", Value(i));
      loop->append("revindex", Value(length - i));
      loop->append("revindex0", Value(length - i - 1));
      loop->append("first", Value(i == 0));
      loop->append("last", Value(i == length - 1));
      loop->append("length", Value(length));
      loop->append("depth", Value(1));
      loop->append("depth0", Value(0));
      loop->append("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value::undefined("there is no previous item"));
      loop->append("nextitem", i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : Value::undefined("there is no next item"));
      loop->append("cycle", cycle);
      scope->vars["loop"] = Value(loop);
      const Flow f = exec(n.body, scope, out);
      if (f == Flow::break_) break;
      if (f == Flow::normal) completed = true;
    }
    if (!completed) return exec(n.else_body, frame, out);
    return Flow::normal;
  }

  // The macro sees the scope it was defined in. That scope holds the macro, so the macro keeps
  // only a weak reference to it (a strong one would be a cycle, never freed).
  Value make_macro(const std::shared_ptr<Macro>& macro, const FramePtr& frame, const Value&) {
    const std::weak_ptr<Frame> scope_of_definition = frame;
    return Value(std::make_shared<Function>(Function{macro->name, [this, macro, scope_of_definition](Args& a) {
                   const FramePtr defined_in = scope_of_definition.lock();
                   if (!defined_in) fail("macro '" + macro->name + "' called after the scope it was defined in ended");
                   if (depth_ + 1 > options_.limits.max_depth) {
                     fail("macro calls nested deeper than " + std::to_string(options_.limits.max_depth));
                   }
                   struct Guard {
                     int& d;
                     explicit Guard(int& depth) : d(depth) { ++d; }
                     ~Guard() { --d; }
                   } guard{depth_};
                   auto scope = std::make_shared<Frame>(Frame{defined_in, {}});
                   List varargs;
                   for (std::size_t i = 0; i < a.pos.size(); ++i) {
                     if (i < macro->params.size()) scope->vars[macro->params[i].first] = a.pos[i];
                     else varargs.push_back(a.pos[i]);
                   }
                   auto kwargs = std::make_shared<Dict>();
                   for (const auto& [k, v] : a.kw) {
                     // C++17 lambdas cannot capture a structured binding (clang refuses it).
                     const std::string& key = k;
                     const bool param = std::any_of(macro->params.begin(), macro->params.end(),
                                                    [&](const auto& p) { return p.first == key; });
                     if (param || k == "caller") scope->vars[k] = v;
                     else kwargs->set(k, v);
                   }
                   for (const auto& [name, dflt] : macro->params) {
                     if (scope->vars.count(name)) continue;
                     scope->vars[name] = dflt ? eval(*dflt, scope) : Value::undefined("'" + name + "' is undefined");
                   }
                   scope->vars["varargs"] = Value(std::make_shared<List>(std::move(varargs)));
                   scope->vars["kwargs"] = Value(kwargs);
                   std::string out;
                   exec(macro->body, scope, out);
                   return Value(std::move(out));
                 }}));
  }

  Args eval_args(const Expr& e, const FramePtr& frame, std::size_t first) {
    Args a;
    for (std::size_t i = first; i < e.items.size(); ++i) a.pos.push_back(eval(*e.items[i], frame));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, frame));
    return a;
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    const Descent descent(*this, e.line, e.column);
    try {
      Value v = eval_unchecked(e, frame);
      return v;
    } catch (const EvalError& err) {
      throw located(e.line, e.column, err.what());
    } catch (const std::bad_variant_access&) {
      throw TemplateError(where(e.line, e.column) + kWrongKind);
    }
  }

  static std::optional<std::int64_t> slice_part(const Value& v) {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None, found " + v.type_name());
    return v.integer();
  }

  Value eval_unchecked(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: {
        const Value* v = frame->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        auto l = std::make_shared<List>();
        for (const auto& x : e.items) l->push_back(eval(*x, frame));
        return Value(l, e.kind == Expr::Kind::tuple);
      }
      case Expr::Kind::dict: {
        auto d = std::make_shared<Dict>();
        for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value k = eval(*e.items[i], frame);
          if (!k.is_string()) fail("dictionary keys must be strings here, found " + k.type_name());
          d->set(k.str_ref(), eval(*e.items[i + 1], frame));
        }
        return Value(d);
      }
      case Expr::Kind::attr: {
        const Value obj = eval(*e.items[0], frame);
        charge(weight(obj));  // a string's methods hold a copy; a dict is searched
        return get_attribute(*this, obj, e.name);
      }
      case Expr::Kind::item: {
        const Value obj = eval(*e.items[0], frame);
        const Value key = eval(*e.items[1], frame);
        charge(weight(obj));  // a string is scanned for its code points; a dict is searched
        return get_item(*this, obj, key);
      }
      case Expr::Kind::slice: {
        const Value target = eval(*e.items[0], frame);
        // Its code points tabulated (8 bytes per byte of a string), and at most as much built.
        charge((target.is_string() ? 9 : 2) * weight(target));
        auto part = [&](std::size_t k) { return e.items[k] ? slice_part(eval(*e.items[k], frame)) : std::nullopt; };
        const auto start = part(1), stop = part(2), step = part(3);
        if (step && *step == 0) fail("slice step cannot be zero");
        if (target.is_string()) {
          const std::vector<std::size_t> off = code_point_offsets(target.str_ref());
          std::string out;
          for (std::size_t i : slice_indices(off.size() - 1, start, stop, step.value_or(1)))
            out.append(target.str_ref(), off[i], off[i + 1] - off[i]);
          return Value(std::move(out));
        }
        if (target.is_list()) {
          List out;
          for (std::size_t i : slice_indices(target.list().size(), start, stop, step.value_or(1)))
            out.push_back(target.list()[i]);
          return Value(std::make_shared<List>(std::move(out)), target.is_tuple());
        }
        if (target.is_undefined()) fail(target.undefined_message());
        fail("'" + target.type_name() + "' object is not subscriptable");
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.items[0], frame);
        Args args = eval_args(e, frame, 1);
        return call(callee, args);
      }
      case Expr::Kind::filter: {
        const Value v = e.items[0] ? eval(*e.items[0], frame) : Value();
        Args args = eval_args(e, frame, 1);
        return filter(e.name, v, args);
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.items[0], frame);
        Args args = eval_args(e, frame, 1);
        return Value(test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.items[0], frame);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) fail(v.undefined_message());
        if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_float() ? v : Value(v.integer());
        if (v.is_float()) return Value(-v.number());
        if (v.integer() == INT64_MIN) fail("integer overflow in unary -");
        return Value(-v.integer());
      }
      case Expr::Kind::binary: return eval_binary(e, frame);
      case Expr::Kind::compare: {
        Value left = eval(*e.items[0], frame);
        for (std::size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.items[k + 1], frame);
          if (!compare_op(e.ops[k], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::cond:
        if (eval(*e.items[0], frame).truthy()) return eval(*e.items[1], frame);
        return e.items[2] ? eval(*e.items[2], frame) : Value::undefined("the conditional expression has no else");
    }
    return Value();
  }

  // Each comparison charges what it reads (value.h): a list of 10^6 references to a 30 MB string
  // is 30 TB to compare, whatever its own size.
  bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b, *this);
    if (op == "!=") return !equal(a, b, *this);
    if (op == "in") return contains(b, a, *this);
    if (op == "notin") return !contains(b, a, *this);
    if (a.is_undefined() || b.is_undefined())
      fail((a.is_undefined() ? a : b).undefined_message());
    const auto c = compare(a, b, *this);
    if (!c) fail("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
    if (op == "<") return *c < 0;
    if (op == "<=") return *c <= 0;
    if (op == ">") return *c > 0;
    return *c >= 0;
  }

  Value eval_binary(const Expr& e, const FramePtr& frame) {
    const std::string& op = e.name;
    const Value a = eval(*e.items[0], frame);
    if (op == "and") return a.truthy() ? eval(*e.items[1], frame) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.items[1], frame);
    const Value b = eval(*e.items[1], frame);
    charge(weight(a) + weight(b));
    Value r = arithmetic(op, a, b);
    check_size(*this, r);
    charge(weight(r));
    return r;
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      const std::string x = a.str(*this), y = b.str(*this);
      if (x.size() + y.size() > max_text()) fail_text_size(x.size() + y.size(), max_text());
      return Value(x + y);
    }
    if (op == "+") return add(*this, a, b);
    if (a.is_undefined() || b.is_undefined()) fail((a.is_undefined() ? a : b).undefined_message());
    if (op == "*") {
      const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
      const Value* times = seq == &a ? &b : &a;
      if (seq && (times->is_int() || times->is_bool())) {
        const std::int64_t n = std::max<std::int64_t>(0, times->integer());
        const std::size_t unit = seq->is_string() ? seq->str_ref().size() : seq->list().size();
        const std::size_t cap = seq->is_string() ? options_.limits.max_output_bytes : options_.limits.max_items;
        if (unit > 0 && static_cast<std::uint64_t>(n) > cap / unit) fail("repetition exceeds the template size limit");
        if (unit == 0) return seq->is_string() ? Value("") : Value(std::make_shared<List>(), seq->is_tuple());  // n may be 10^18
        if (seq->is_string()) {
          std::string out;
          for (std::int64_t i = 0; i < n; ++i) out += seq->str_ref();
          return Value(std::move(out));
        }
        List out;
        out.reserve(static_cast<std::size_t>(n) * unit);
        for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->list().begin(), seq->list().end());
        return Value(std::make_shared<List>(std::move(out)), seq->is_tuple());
      }
    }
    if (!a.is_number() || !b.is_number())
      fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    const bool ints = !a.is_float() && !b.is_float();
    const std::int64_t x = ints ? a.integer() : 0, y = ints ? b.integer() : 0;
    const double p = a.number(), q = b.number();
    std::int64_t r = 0;
    if (op == "-") {
      if (!ints) return Value(p - q);
      if (__builtin_sub_overflow(x, y, &r)) fail("integer overflow in -");
      return Value(r);
    }
    if (op == "*") {
      if (!ints) return Value(p * q);
      if (__builtin_mul_overflow(x, y, &r)) fail("integer overflow in *");
      return Value(r);
    }
    if (op == "/") {
      if (q == 0) fail("division by zero");
      return Value(p / q);
    }
    if (op == "//" || op == "%") {
      if (q == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) fail("integer overflow in " + op);
        std::int64_t d = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward negative infinity
          --d;
          m += y;
        }
        return Value(op == "//" ? d : m);
      }
      const double d = std::floor(p / q);
      if (op == "//") return Value(d);
      double m = std::fmod(p, q);
      if (m != 0 && ((m < 0) != (q < 0))) m += q;
      return Value(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        // By squaring: y can be 10^10 with x in {0, 1, -1}, where multiplying y times never
        // overflows and never ends (found by fuzzing). Any |x| >= 2 overflows by y = 63.
        std::int64_t out = 1, base = x;
        for (std::int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(out, base, &out)) fail("integer overflow in **");
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow in **");
        }
        return Value(out);
      }
      return Value(float_pow(p, q));
    }
    fail("unknown operator " + op);
  }

  // Python's float ** and int ** negative int, with its errors where C's pow gives inf or nan
  // (0 ** -1 printed inf, 2.0 ** 10000 inf, (-8) ** 0.5 nan).
  static double float_pow(double p, double q) {
    if (p == 0 && q < 0 && std::isfinite(q)) fail("0.0 cannot be raised to a negative power");
    if (p < 0 && std::isfinite(q) && q != std::floor(q))
      fail("a negative number to a fractional power is a complex number, which templates here do not have");
    const double r = std::pow(p, q);
    if (std::isinf(r) && std::isfinite(p) && std::isfinite(q)) fail("(34, 'Numerical result out of range')");
    return r;
  }

  const Program& program_;
  const RenderOptions& options_;
  std::uint64_t work_ = 0;  // Limits::max_work
  std::time_t now_;
  Rendered result_;
  const std::string* root_ = nullptr;
  std::int64_t iterations_ = 0;
  int depth_ = 0;
  int render_depth_ = 0;            // Descent
  std::uintptr_t stack_base_ = 0;  // the frame of run(): Descent measures the stack from it
  std::vector<std::weak_ptr<Namespace>> namespaces_;  // adopt()
  std::size_t prune_at_ = 64;
};

}  // namespace

Template::Template(std::string source) : program_(std::make_unique<Program>()) {
  if (source.size() > kMaxSourceBytes)
    throw TemplateError("template of " + std::to_string(source.size()) + " bytes is larger than the limit of " +
                        std::to_string(kMaxSourceBytes));
  // Python's strict decoder's rule (a template is a str): no overlong forms or surrogates either.
  if (const std::size_t bad = find_invalid_utf8(source); bad != std::string::npos) {
    int line, column;
    position_of(source, bad, line, column);
    throw TemplateError(where(line, column) + "the template is not valid UTF-8");
  }
  // Jinja2's lexer: \r\n and \r are line breaks, and one trailing line break is dropped.
  std::string normal;
  normal.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normal += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normal += source[i];
    }
  }
  if (!normal.empty() && normal.back() == '\n') normal.pop_back();
  program_->body = parse(lex(normal));
  program_->has_generation = walk_has_generation(program_->body);
  program_->source = std::move(source);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render(const Dict& variables, const RenderOptions& options) const {
  Renderer r(*program_, options);
  return r.run(variables);
}

bool Template::has_generation() const { return program_->has_generation; }
const std::string& Template::source() const { return program_->source; }

}  // namespace ctune::tmpl
