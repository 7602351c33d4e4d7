// Helpers shared by the built-ins; see builtin_args.h.
#include "template/builtin_args.h"

#include "template/pystr.h"

namespace ctune::tmpl::builtin {

[[noreturn]] void fail(const std::string& what) { throw EvalError(what); }

const Value* arg(const Args& a, std::size_t i, std::string_view name) { return a.get(i, name); }

bool arg_bool(const Args& a, std::size_t i, std::string_view name, bool dflt) {
  const Value* v = arg(a, i, name);
  return v ? v->truthy() : dflt;
}

std::int64_t arg_int(const Args& a, std::size_t i, std::string_view name, std::int64_t dflt) {
  const Value* v = arg(a, i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) fail("expected an integer for '" + std::string(name) + "', found " + v->type_name());
  return v->integer();
}

std::optional<std::int64_t> arg_index(const Args& a, std::size_t i, std::string_view name) {
  const Value* v = arg(a, i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_int() && !v->is_bool()) fail("slice indices must be integers or None, found " + v->type_name() + " for '" + std::string(name) + "'");
  return v->integer();
}

std::optional<std::string> arg_str(const Args& a, std::size_t i, std::string_view name) {
  const Value* v = arg(a, i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  if (!v->is_string()) fail("expected a string for '" + std::string(name) + "', found " + v->type_name());
  return v->str_ref();
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + " expects a string, found " + v.type_name());
  return v.str_ref();
}

Value make_list(List items, bool tuple) { return Value(std::make_shared<List>(std::move(items)), tuple); }

// The items a `for` loop or a list-taking filter sees: list items, dict keys, string code points.
List iterate(const Meter& m, const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return {};
  List out;
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dict().items()) out.emplace_back(k);
    return out;
  }
  if (v.is_string()) {
    const std::string& s = v.str_ref();
    // A one-character string per code point: ~100 bytes each, so 3 GB for a 30 MB string.
    if (const std::size_t n = code_point_count(s); n > m.max_items()) fail_list_size(n, m.max_items());
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t start = i;
      decode_code_point(s, i);
      out.emplace_back(s.substr(start, i - start));
    }
    return out;
  }
  fail("'" + v.type_name() + "' object is not iterable");
}

Value bound(std::string name, std::function<Value(Args&)> f) {
  return Value(std::make_shared<Function>(Function{std::move(name), std::move(f)}));
}

Value folded(const Value& v, bool case_sensitive, Meter& m) {
  if (case_sensitive || !v.is_string()) return v;
  m.charge(v.str_ref().size() + 1);
  return Value(py_lower(v.str_ref()));
}

Value checked_replace(const Meter& m, std::string_view s, std::string_view old, std::string_view repl, std::int64_t count) {
  const std::uint64_t bytes = py_replace_size(s, old, repl, count);
  if (bytes > m.max_text()) fail_text_size(bytes, m.max_text());
  return Value(py_replace(s, old, repl, count));
}

int ordered(const Value& a, const Value& b, Meter& m) {
  auto c = compare(a, b, m);
  if (!c) fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  return *c;
}

}  // namespace ctune::tmpl::builtin
