// Jinja2's built-in filters and tests, as Jinja2 3.1 defines them (and transformers' tojson);
// see builtins.h.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "template/builtin_args.h"
#include "template/builtins.h"
#include "template/pynum.h"
#include "template/pystr.h"

namespace ctune::tmpl {

namespace {

using namespace builtin;  // NOLINT: this file is the built-ins' own

using Filter = Value (*)(Env&, const Value&, Args&);
using Test = bool (*)(Env&, const Value&, Args&);

// A dotted attribute path ("function.name") or an integer index, as Jinja2's make_attrgetter.
Value attr_path(Env& env, const Value& v, const std::string& path) {
  Value cur = v;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    cur = is_decimal(part) ? get_item(env, cur, Value(saturated_index(part))) : get_item(env, cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// The value sort/unique/min/max compare: the attribute, lower-cased unless case_sensitive.
Value sort_key(Env& env, const Value& v, const std::optional<std::string>& attribute, bool case_sensitive) {
  return folded(attribute ? attr_path(env, v, *attribute) : v, case_sensitive, env);
}

// ---- filters --------------------------------------------------------------------------------

Value f_default(Env&, const Value& v, Args& a) {
  const Value* d = arg(a, 0, "default_value");
  const bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value(std::string());
  return v;
}

Value f_length(Env&, const Value& v, Args&) {
  auto n = v.length();
  if (!n) fail("object of type '" + v.type_name() + "' has no len()");
  return Value(static_cast<std::int64_t>(*n));
}

Value f_join(Env& env, const Value& v, Args& a) {
  const std::string sep = arg_str(a, 0, "d").value_or("");
  const auto attribute = arg_str(a, 1, "attribute");
  TextBuilder out(env.max_text());
  bool first = true;
  for (const Value& x : iterate(env, v)) {
    if (!first) out.append(sep);
    first = false;
    out.append((attribute ? attr_path(env, x, *attribute) : x).str(env));
  }
  return Value(out.take());
}

Value f_upper(Env& env, const Value& v, Args&) { return Value(py_upper(v.str(env))); }
Value f_lower(Env& env, const Value& v, Args&) { return Value(py_lower(v.str(env))); }
Value f_capitalize(Env& env, const Value& v, Args&) { return Value(py_capitalize(v.str(env))); }
// Jinja2's title filter (not str.title): a word starts after whitespace or one of - ( { [ <.
Value f_title(Env& env, const Value& v, Args&) {
  const std::string s = v.str(env);
  std::string out;
  bool word_start = true;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t start = i;
    const std::uint32_t cp = decode_code_point(s, i);
    const bool sep = is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      out.append(s, start, i - start);
      word_start = true;
      continue;
    }
    const std::string ch = s.substr(start, i - start);
    out += word_start ? py_upper(ch) : py_lower(ch);
    word_start = false;
  }
  return Value(std::move(out));
}
Value f_trim(Env& env, const Value& v, Args& a) { return Value(py_strip(v.str(env), arg_str(a, 0, "chars"))); }
Value f_string(Env& env, const Value& v, Args&) { return Value(v.str(env)); }
// Jinja2's Markup(value): the value's text (None -> 'None', a list its repr; undefined -> '').
Value f_safe(Env& env, const Value& v, Args&) { return v.is_string() ? v : Value(v.str(env)); }

// A string's first and last code points are read where they are, not by splitting it.
Value f_first(Env& env, const Value& v, Args&) {
  if (v.is_string() && !v.str_ref().empty()) {
    std::size_t end = 0;
    decode_code_point(v.str_ref(), end);
    return Value(v.str_ref().substr(0, end));
  }
  List l = v.is_string() ? List() : iterate(env, v);
  return l.empty() ? Value::undefined("No first item, sequence was empty.") : l.front();
}
Value f_last(Env& env, const Value& v, Args&) {
  if (v.is_string() && !v.str_ref().empty()) {
    const std::string& s = v.str_ref();
    std::size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    return Value(s.substr(start));
  }
  List l = v.is_string() ? List() : iterate(env, v);
  return l.empty() ? Value::undefined("No last item, sequence was empty.") : l.back();
}

Value f_list(Env& env, const Value& v, Args&) { return make_list(iterate(env, v)); }

Value f_items(Env&, const Value& v, Args&) {
  if (v.is_undefined()) return make_list({});
  if (!v.is_dict()) fail("can only get item pairs from a mapping, found " + v.type_name());
  List out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(make_list({Value(k), x}, true));
  return make_list(std::move(out));
}

Value f_replace(Env& env, const Value& v, Args& a) {
  const Value* old = arg(a, 0, "old");
  const Value* repl = arg(a, 1, "new");
  if (!old || !repl) fail("replace() needs the old and new strings");
  return checked_replace(env, v.str(env), old->str(env), repl->str(env), arg_int(a, 2, "count", -1));
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
// its positional order differs from Jinja2's own tojson(indent), so tojson(2) escapes non-ASCII.
Value f_tojson(Env& env, const Value& v, Args& a) {
  const bool ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  std::optional<int> indent;
  if (const Value* i = arg(a, 1, "indent"); i && !i->is_none()) {
    if (!i->is_int()) fail("tojson indent expects an integer, found " + i->type_name());
    indent = static_cast<int>(std::clamp<std::int64_t>(i->integer(), 0, 64));
  }
  std::optional<std::pair<std::string, std::string>> separators;
  if (const Value* s = arg(a, 2, "separators"); s && s->is_list() && s->list().size() == 2)
    separators = std::make_pair(s->list()[0].str(env), s->list()[1].str(env));
  std::string bad;
  auto out = to_json(v, indent, arg_bool(a, 3, "sort_keys", false), separators, bad, ensure_ascii, env);
  if (!out) fail("Object of type " + bad + " is not JSON serializable");
  return Value(std::move(*out));
}

// int(x) of a finite double: Python's int is unbounded, ctune's 64 bits (docs/chat-templates.md).
Value truncated(double x) {
  if (!(x > -0x1p63 && x < 0x1p63)) fail("int() of " + float_repr(x) + " is beyond 64 bits");
  return Value(static_cast<std::int64_t>(x));
}

// Jinja2's int filter: int(value, base) for a str, int(value) otherwise; where that raises
// ValueError or TypeError, int(float(value)); where that fails too (OverflowError included), the
// default. So int(inf) of a float value is an error, but of the string 'inf' the default.
Value f_int(Env&, const Value& v, Args& a) {
  const std::int64_t dflt = arg_int(a, 0, "default", 0);
  if (v.is_undefined()) fail(v.undefined_message());  // int(Undefined) raises in Jinja2
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.is_float()) {
    if (std::isinf(v.number())) fail("cannot convert float infinity to integer");
    return std::isnan(v.number()) ? Value(dflt) : truncated(v.number());
  }
  if (!v.is_string()) return Value(dflt);
  const Value* base = arg(a, 1, "base");
  bool beyond_64_bits = false;
  if (!base || base->is_int()) {
    if (auto i = py_int(v.str_ref(), base ? base->integer() : 10, beyond_64_bits)) return Value(*i);
    if (beyond_64_bits) fail("int() of '" + v.str_ref() + "' is beyond 64 bits");
  }
  const std::optional<double> d = py_float(v.str_ref());
  return d && std::isfinite(*d) ? truncated(*d) : Value(dflt);
}

Value f_float(Env&, const Value& v, Args& a) {
  const Value* d = arg(a, 0, "default");
  const Value dflt = d ? *d : Value(0.0);
  if (v.is_undefined()) fail(v.undefined_message());  // float(Undefined) raises in Jinja2
  if (v.is_number()) return Value(v.number());
  if (v.is_string())
    if (const std::optional<double> x = py_float(v.str_ref())) return Value(*x);
  return dflt;
}

Value f_abs(Env&, const Value& v, Args&) {
  if (v.is_int() || v.is_bool()) {
    // abs(-2**63) is 2**63 in Python, one past the 64-bit ints (docs/chat-templates.md).
    if (v.integer() == INT64_MIN) fail("integer overflow in abs");
    return Value(v.integer() < 0 ? -v.integer() : v.integer());
  }
  if (v.is_float()) return Value(std::fabs(v.number()));
  fail("bad operand type for abs(): '" + v.type_name() + "'");
}

// Jinja2's round: Python's round(value, precision) for "common" (an int stays an int, rounded to
// tens, hundreds... for a negative precision), else math.ceil or math.floor of value * 10**precision,
// divided back, with Python's errors where a step overflows or divides by zero.
Value f_round(Env&, const Value& v, Args& a) {
  const std::string method = arg_str(a, 1, "method").value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("round() expects a number, found " + v.type_name());
  const std::int64_t precision = arg_int(a, 0, "precision", 0);
  if (method == "common") {
    if (v.is_float()) {
      const std::optional<double> r = py_round(v.number(), precision);
      if (!r) fail("rounded value too large to represent");
      return Value(*r);
    }
    const std::optional<std::int64_t> r = py_round(v.integer(), precision);
    if (!r) fail("integer overflow in round");  // Python's ints grow (docs/chat-templates.md)
    return Value(*r);
  }
  if (precision > 308) fail("int too large to convert to float");  // 10**precision, a Python int, as a float
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (scale == 0) fail("float division by zero");
  const double x = v.number() * scale;
  if (std::isinf(x)) fail("cannot convert float infinity to integer");
  if (std::isnan(x)) fail("cannot convert float NaN to integer");
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_reverse(Env& env, const Value& v, Args&) {
  if (v.is_string()) return Value(py_reversed(v.str_ref()));
  List l = iterate(env, v);
  std::reverse(l.begin(), l.end());
  return make_list(std::move(l));
}

Value f_sort(Env& env, const Value& v, Args& a) {
  const bool reverse = arg_bool(a, 0, "reverse", false);
  const bool case_sensitive = arg_bool(a, 1, "case_sensitive", false);
  const auto attribute = arg_str(a, 2, "attribute");
  List l = iterate(env, v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : l) keyed.emplace_back(sort_key(env, x, attribute, case_sensitive), x);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
    return reverse ? ordered(q.first, p.first, env) < 0 : ordered(p.first, q.first, env) < 0;
  });
  List out;
  for (auto& [k, x] : keyed) out.push_back(x);
  return make_list(std::move(out));
}

// Jinja2's unique: each item whose key was not seen before, in order, the keys kept in a set (so
// unhashable keys, lists and dicts, are Python's TypeError). A set, not a scan of the kept keys per
// item: the scan was quadratic (10^6 items of 10^5 distinct keys, 5 x 10^10 comparisons).
Value f_unique(Env& env, const Value& v, Args& a) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const auto attribute = arg_str(a, 1, "attribute");
  struct Key {
    Value value;
    std::size_t hash;
  };
  struct ByHash {
    std::size_t operator()(const Key& k) const { return k.hash; }
  };
  struct Equal {
    Meter* meter;
    bool operator()(const Key& x, const Key& y) const { return equal(x.value, y.value, *meter); }
  };
  std::unordered_set<Key, ByHash, Equal> seen(16, ByHash{}, Equal{&env});
  List out;
  for (const Value& x : iterate(env, v)) {
    Value key = sort_key(env, x, attribute, case_sensitive);
    const std::size_t h = hash(key, env);
    if (seen.insert(Key{std::move(key), h}).second) out.push_back(x);
  }
  return make_list(std::move(out));
}

Value min_max(Env& env, const Value& v, Args& a, bool want_max) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const auto attribute = arg_str(a, 1, "attribute");
  List l = iterate(env, v);
  if (l.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  std::size_t best = 0;
  Value best_key = sort_key(env, l[0], attribute, case_sensitive);
  for (std::size_t i = 1; i < l.size(); ++i) {
    Value k = sort_key(env, l[i], attribute, case_sensitive);
    const int c = ordered(k, best_key, env);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return l[best];
}
Value f_min(Env& env, const Value& v, Args& a) { return min_max(env, v, a, false); }
Value f_max(Env& env, const Value& v, Args& a) { return min_max(env, v, a, true); }

Value f_sum(Env& env, const Value& v, Args& a) {
  const auto attribute = arg_str(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value(std::int64_t{0});
  if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");  // Python's sum
  for (const Value& x : iterate(env, v)) {
    total = add(env, total, attribute ? attr_path(env, x, *attribute) : x);
    env.charge(weight(total));  // each step copies a list total: 10^6 steps would copy 10^12 items
  }
  return total;
}

Value select_impl(Env& env, const Value& v, Args& a, bool by_attr, bool keep) {
  std::size_t first_test_arg = 0;
  std::optional<std::string> attribute;
  if (by_attr) {
    attribute = arg_str(a, 0, "attribute");
    if (!attribute) fail("selectattr/rejectattr need an attribute name");
    first_test_arg = 1;
  }
  std::optional<std::string> test_name;
  if (a.pos.size() > first_test_arg) test_name = need_str(a.pos[first_test_arg], "the test name");
  Args test_args;
  for (std::size_t i = first_test_arg + 1; i < a.pos.size(); ++i) test_args.pos.push_back(a.pos[i]);
  List out;
  for (const Value& x : iterate(env, v)) {
    const Value item = attribute ? attr_path(env, x, *attribute) : x;
    Args copy = test_args;
    const bool ok = test_name ? env.test(*test_name, item, copy) : item.truthy();
    if (ok == keep) out.push_back(x);
  }
  return make_list(std::move(out));
}
Value f_select(Env& env, const Value& v, Args& a) { return select_impl(env, v, a, false, true); }
Value f_reject(Env& env, const Value& v, Args& a) { return select_impl(env, v, a, false, false); }
Value f_selectattr(Env& env, const Value& v, Args& a) { return select_impl(env, v, a, true, true); }
Value f_rejectattr(Env& env, const Value& v, Args& a) { return select_impl(env, v, a, true, false); }

Value f_map(Env& env, const Value& v, Args& a) {
  List out;
  if (const auto attribute = arg_str(a, 99, "attribute")) {
    const Value* dflt = arg(a, 99, "default");
    for (const Value& x : iterate(env, v)) {
      Value r = attr_path(env, x, *attribute);
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return make_list(std::move(out));
  }
  if (a.pos.empty()) fail("map() needs a filter name or attribute=");
  const std::string name = need_str(a.pos[0], "map's filter name");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& x : iterate(env, v)) {
    Args copy = rest;
    out.push_back(env.filter(name, x, copy));
  }
  return make_list(std::move(out));
}

Value f_attr(Env& env, const Value& v, Args& a) {
  const auto name = arg_str(a, 0, "name");
  if (!name) fail("attr() needs a name");
  return get_attribute(env, v, *name);
}

// Jinja2's indent: the string and a newline split into lines, joined by newlines, each line but
// the first prefixed with the pad when it is not empty (or blank=True), the first when first=True.
// Lines are read in place and the text checked as it grows: a 30 MB pad over 10^6 lines was 30 TB.
Value f_indent(Env& env, const Value& v, Args& a) {
  std::string pad;
  if (const Value* w = arg(a, 0, "width"); w && w->is_string()) pad = w->str_ref();
  else  // a pad past the output limit can never be written; a shorter one is Python's " " * width
    pad = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(arg_int(a, 0, "width", 4), 0,
                                                                      static_cast<std::int64_t>(env.max_text()) + 1)), ' ');
  const bool first = arg_bool(a, 1, "first", false);
  const bool blank = arg_bool(a, 2, "blank", false);
  if (v.is_undefined()) fail(v.undefined_message());
  // Jinja2 appends "\n" and splits: so the value must be a str, and "a\n" has a last, empty line.
  const std::string s = need_str(v, "indent") + "\n";
  TextBuilder out(env.max_text());
  bool first_line = true;
  for_each_line(s, false, [&](std::string_view line) {
    if (!first_line) out.append('\n');
    if (first_line ? first : blank || !line.empty()) out.append(pad);
    out.append(line);
    first_line = false;
  });
  return Value(out.take());
}

Value f_escape(Env& env, const Value& v, Args&) {
  TextBuilder out(env.max_text());
  const std::string s = v.str(env);
  std::size_t run = 0;  // [run, i): bytes copied as they are, appended at once
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char* entity = nullptr;
    switch (s[i]) {
      case '&': entity = "&amp;"; break;
      case '<': entity = "&lt;"; break;
      case '>': entity = "&gt;"; break;
      case '"': entity = "&#34;"; break;
      case '\'': entity = "&#39;"; break;
      default: continue;
    }
    out.append(std::string_view(s).substr(run, i - run));
    out.append(entity);
    run = i + 1;
  }
  out.append(std::string_view(s).substr(run));
  return Value(out.take());
}

Value f_dictsort(Env& env, const Value& v, Args& a) {
  if (!v.is_dict()) fail("dictsort expects a mapping, found " + v.type_name());
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const bool by_value = arg_str(a, 1, "by").value_or("key") == "value";
  const bool reverse = arg_bool(a, 2, "reverse", false);
  List items;
  for (const auto& [k, x] : v.dict().items()) items.push_back(make_list({Value(k), x}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
    const Value kp = folded(p.list()[by_value ? 1 : 0], case_sensitive, env);
    const Value kq = folded(q.list()[by_value ? 1 : 0], case_sensitive, env);
    return reverse ? ordered(kq, kp, env) < 0 : ordered(kp, kq, env) < 0;
  });
  return make_list(std::move(items));
}

Value f_wordcount(Env& env, const Value& v, Args&) {
  return Value(static_cast<std::int64_t>(py_word_count(v.str(env))));
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"default", f_default}, {"d", f_default}, {"length", f_length}, {"count", f_length}, {"join", f_join},
      {"upper", f_upper}, {"lower", f_lower}, {"capitalize", f_capitalize}, {"title", f_title}, {"trim", f_trim},
      {"string", f_string}, {"safe", f_safe}, {"first", f_first}, {"last", f_last}, {"list", f_list},
      {"items", f_items}, {"replace", f_replace}, {"tojson", f_tojson}, {"int", f_int}, {"float", f_float},
      {"abs", f_abs}, {"round", f_round}, {"reverse", f_reverse}, {"sort", f_sort}, {"unique", f_unique},
      {"min", f_min}, {"max", f_max}, {"sum", f_sum}, {"select", f_select}, {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map}, {"attr", f_attr},
      {"indent", f_indent}, {"e", f_escape}, {"escape", f_escape}, {"forceescape", f_escape},
      {"dictsort", f_dictsort}, {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests ----------------------------------------------------------------------------------

const Value& test_arg(const Args& a, const char* test) {
  const Value* v = arg(a, 0, "other");
  if (!v) fail(std::string("test '") + test + "' needs an argument");
  return *v;
}

bool t_defined(Env&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Env&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Env&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Env&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Env&, const Value& v, Args&) { return v.is_bool() && v.boolean(); }
bool t_false(Env&, const Value& v, Args&) { return v.is_bool() && !v.boolean(); }
bool t_integer(Env&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Env&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Env&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Env&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Env&, const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(Env&, const Value& v, Args&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
// Jinja2's Undefined has __len__, __getitem__, __iter__ and __call__ (each failing on use), so
// it passes the iterable, sequence and callable tests.
bool t_sequence(Env&, const Value& v, Args&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool t_callable(Env&, const Value& v, Args&) { return v.is_function() || v.is_undefined(); }
// Jinja2's value % 2 (== 1: odd, == 0: even) for ints and floats; a float's remainder takes the
// divisor's sign, as Python's does, so -1.0 is odd and 1.5 neither.
double remainder_of_2(const Value& v, const char* test) {
  if (v.is_undefined()) fail(v.undefined_message());
  if (v.is_int() || v.is_bool()) return static_cast<double>(v.integer() % 2 != 0);
  if (!v.is_float()) fail(std::string("test '") + test + "' expects a number, found " + v.type_name());
  const double r = std::fmod(v.number(), 2.0);
  return r < 0 ? r + 2.0 : r;  // NaN for inf and nan: neither odd nor even
}
bool t_odd(Env&, const Value& v, Args&) { return remainder_of_2(v, "odd") == 1.0; }
bool t_even(Env&, const Value& v, Args&) { return remainder_of_2(v, "even") == 0.0; }
// Jinja2's value % num == 0, for ints and floats alike.
bool t_divisibleby(Env&, const Value& v, Args& a) {
  const Value* num = arg(a, 0, "num");
  if (!num) fail("test 'divisibleby' needs the divisor (num)");
  const Value& n = *num;
  if (!v.is_number() || !n.is_number())
    fail("unsupported operand type(s) for %: '" + v.type_name() + "' and '" + n.type_name() + "'");
  if (n.number() == 0) fail("integer division or modulo by zero");
  if (v.is_float() || n.is_float()) return std::fmod(v.number(), n.number()) == 0;
  return n.integer() == -1 || v.integer() % n.integer() == 0;  // INT64_MIN % -1 traps
}
bool t_eq(Env& env, const Value& v, Args& a) { return equal(v, test_arg(a, "eq"), env); }
bool t_ne(Env& env, const Value& v, Args& a) { return !equal(v, test_arg(a, "ne"), env); }
bool t_lt(Env& env, const Value& v, Args& a) { return ordered(v, test_arg(a, "lt"), env) < 0; }
bool t_le(Env& env, const Value& v, Args& a) { return ordered(v, test_arg(a, "le"), env) <= 0; }
bool t_gt(Env& env, const Value& v, Args& a) { return ordered(v, test_arg(a, "gt"), env) > 0; }
bool t_ge(Env& env, const Value& v, Args& a) { return ordered(v, test_arg(a, "ge"), env) >= 0; }
// Jinja2's str(value).islower(): some cased character, none of the other case ('' is not lower).
bool t_lower(Env& env, const Value& v, Args&) { return py_is(v.str(env), "islower"); }
bool t_upper(Env& env, const Value& v, Args&) { return py_is(v.str(env), "isupper"); }
bool t_escaped(Env&, const Value&, Args&) { return false; }
bool t_in(Env& env, const Value& v, Args& a) { return contains(test_arg(a, "in"), v, env); }
bool t_sameas(Env&, const Value& v, Args& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.is_list() && o.is_list()) return v.list_ptr() == o.list_ptr();
  if (v.is_dict() && o.is_dict()) return v.dict_ptr() == o.dict_ptr();
  return v.kind() == o.kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && v.boolean() == o.boolean()));
}

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> table = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
      {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
      {"callable", t_callable}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt},
      {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge},
      {">=", t_ge}, {"lower", t_lower}, {"upper", t_upper}, {"escaped", t_escaped}, {"in", t_in},
      {"sameas", t_sameas},
  };
  return table;
}


}  // namespace

std::optional<Value> apply_filter(Env& env, const std::string& name, const Value& v, Args& args) {
  const auto& table = filters();
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  Value out = it->second(env, v, args);
  check_size(env, out);
  return out;
}

std::optional<bool> apply_test(Env& env, const std::string& name, const Value& v, Args& args) {
  const auto& table = tests();
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second(env, v, args);
}


}  // namespace ctune::tmpl
