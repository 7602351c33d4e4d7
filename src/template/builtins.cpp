// Python's methods on str, dict and list, attribute and item access with the immutable
// sandbox's rules, the operators shared with the renderer, and the globals; see builtins.h.
#include "template/builtins.h"

#include <algorithm>
#include <charconv>
#include <functional>

#include "template/builtin_args.h"
#include "template/pystr.h"

namespace ctune::tmpl {

namespace {

using namespace builtin;  // NOLINT: this file is the built-ins' own

// ---- methods --------------------------------------------------------------------------------

std::optional<std::vector<std::string>> prefixes(const Value& v) {
  if (v.is_string()) return std::vector<std::string>{v.str_ref()};
  if (v.is_list() && v.is_tuple()) {
    std::vector<std::string> out;
    for (const Value& x : v.list()) out.push_back(need_str(x, "startswith/endswith"));
    return out;
  }
  return std::nullopt;
}

// Python's str.format with {} / {0} / {name} fields (no format specs), built under the output
// limit: '{0}' * 10^6 of a 30 MB argument would be 30 TB.
std::string py_format(const std::string& fmt, const Args& a, const Meter& m) {
  TextBuilder out(m.max_text());
  std::size_t auto_index = 0;
  enum class Numbering { unset, automatic, manual } numbering = Numbering::unset;
  const auto number = [&](Numbering n) {  // Python refuses {} and {0} in one format string
    if (numbering != Numbering::unset && numbering != n) fail("cannot switch from manual field specification to automatic field numbering");
    numbering = n;
  };
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.append('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.append('}');
      ++i;
    } else if (c == '{') {
      const std::size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) fail("format specs in str.format are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        number(Numbering::automatic);
        v = arg(a, auto_index++, "\x01");
      } else if (is_decimal(field)) {
        number(Numbering::manual);
        std::size_t index = 0;
        if (std::from_chars(field.data(), field.data() + field.size(), index).ec != std::errc()) fail("Too many decimal digits in format string");
        v = arg(a, index, "\x01");
      } else {
        v = arg(a, SIZE_MAX, field);
      }
      if (!v) fail("str.format: no argument for {" + field + "}");
      out.append(v->str(m));
      i = close;
    } else {
      out.append(c);
    }
  }
  return out.take();
}

Value string_method(Env& env, const Value& self, const std::string& name) {
  const std::string s = self.str_ref();
  auto m = [&](auto f) { return bound("str." + name, f); };
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return m([s, name](Args& a) {
      return Value(py_strip(s, arg_str(a, 0, "chars"), name != "rstrip", name != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return m([s, name, &env](Args& a) {
      List out;
      const std::optional<std::string> sep = arg_str(a, 0, "sep");
      // Python's ValueError; py_split would find "" at the same place forever (found by fuzzing).
      if (sep && sep->empty()) fail("empty separator");
      // At most max_items splits: the parts are the same up to there, and one part more than a
      // list may hold is refused (call's check_size) without building 30 M of them first.
      const auto cap = static_cast<std::int64_t>(env.max_items());
      const std::int64_t maxsplit = arg_int(a, 1, "maxsplit", -1);
      for (auto& part : py_split(s, sep, maxsplit < 0 || maxsplit > cap ? cap : maxsplit, name == "rsplit"))
        out.emplace_back(std::move(part));
      return make_list(std::move(out));
    });
  if (name == "splitlines")
    return m([s, &env](Args& a) {
      List out;
      for_each_line(s, arg_bool(a, 0, "keepends", false), [&](std::string_view line) {
        if (out.size() == env.max_items()) fail_list_size(out.size() + 1, env.max_items());
        out.emplace_back(std::string(line));
      });
      return make_list(std::move(out));
    });
  if (name == "startswith" || name == "endswith")
    return m([s, name](Args& a) {
      const Value* p = arg(a, 0, "prefix");
      if (!p) fail(name + "() needs an argument");
      auto options = prefixes(*p);
      if (!options) fail(name + " first arg must be str or a tuple of str, not " + p->type_name());
      // Optional start and end: code-point indices, Python's rules (pystr.h).
      const std::optional<std::int64_t> start = arg_index(a, 1, "start"), end = arg_index(a, 2, "end");
      for (const auto& o : *options)
        if (py_tailmatch(s, o, name == "endswith", start, end)) return Value(true);
      return Value(false);
    });
  if (name == "upper") return m([s](Args&) { return Value(py_upper(s)); });
  if (name == "lower") return m([s](Args&) { return Value(py_lower(s)); });
  if (name == "title") return m([s](Args&) { return Value(py_title(s)); });
  if (name == "capitalize") return m([s](Args&) { return Value(py_capitalize(s)); });
  if (name == "replace")
    return m([s, &env](Args& a) {
      const auto old = arg_str(a, 0, "old"), repl = arg_str(a, 1, "new");
      if (!old || !repl) fail("replace() needs the old and new strings");
      return checked_replace(env, s, *old, *repl, arg_int(a, 2, "count", -1));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex")
    return m([s, name](Args& a) {
      const auto sub = arg_str(a, 0, "sub");
      if (!sub) fail(name + "() needs a string");
      const std::int64_t at = py_find(s, *sub, name[0] == 'r', arg_index(a, 1, "start"), arg_index(a, 2, "end"));
      if (at < 0 && (name == "index" || name == "rindex")) fail("substring not found");
      return Value(at);
    });
  if (name == "count")
    return m([s](Args& a) {
      const auto sub = arg_str(a, 0, "sub");
      if (!sub) fail("count() needs a string");
      return Value(py_count(s, *sub, arg_index(a, 1, "start"), arg_index(a, 2, "end")));
    });
  if (name == "join")
    return m([s, &env](Args& a) {
      if (a.pos.empty()) fail("join() needs an iterable");
      TextBuilder out(env.max_text());
      bool first = true;
      for (const Value& x : iterate(env, a.pos[0])) {
        if (!first) out.append(s);
        first = false;
        out.append(need_str(x, "str.join"));
      }
      return Value(out.take());
    });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper")
    return m([s, name](Args&) { return Value(py_is(s, name)); });
  if (name == "removeprefix" || name == "removesuffix")
    return m([s, name](Args& a) {
      const std::string p = arg_str(a, 0, "prefix").value_or("");
      if (name == "removeprefix") return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
      return Value(s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0 ? s.substr(0, s.size() - p.size())
                                                                                         : s);
    });
  if (name == "format") return m([s, &env](Args& a) { return Value(py_format(s, a, env)); });
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  const DictPtr d = self.dict_ptr();
  if (name == "items")
    return bound("dict.items", [d](Args&) {
      List out;
      for (const auto& [k, x] : d->items()) out.push_back(make_list({Value(k), x}, true));
      return make_list(std::move(out));
    });
  if (name == "keys")
    return bound("dict.keys", [d](Args&) {
      List out;
      for (const auto& [k, x] : d->items()) out.emplace_back(k);
      return make_list(std::move(out));
    });
  if (name == "values")
    return bound("dict.values", [d](Args&) {
      List out;
      for (const auto& [k, x] : d->items()) out.push_back(x);
      return make_list(std::move(out));
    });
  if (name == "get")
    return bound("dict.get", [d](Args& a) {
      if (a.pos.empty()) fail("get() needs a key");
      const Value* found = a.pos[0].is_string() ? d->find(a.pos[0].str_ref()) : nullptr;
      if (found) return *found;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    });
  return Value();
}

Value list_method(Env& env, const Value& self, const std::string& name) {
  const ListPtr l = self.list_ptr();
  if (name == "index")
    return bound("list.index", [l, &env](Args& a) {
      if (a.pos.empty()) fail("index() needs a value");
      for (std::size_t i = 0; i < l->size(); ++i)
        if (equal((*l)[i], a.pos[0], env)) return Value(static_cast<std::int64_t>(i));
      fail(excerpt(a.pos[0]) + " is not in list");
    });
  if (name == "count")
    return bound("list.count", [l, &env](Args& a) {
      if (a.pos.empty()) fail("count() needs a value");
      return Value(static_cast<std::int64_t>(std::count_if(l->begin(), l->end(), [&](const Value& x) { return equal(x, a.pos[0], env); })));
    });
  return Value();
}

bool is_mutating(const Value& obj, const std::string& name) {
  static const char* const list_ops[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const char* const dict_ops[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (obj.is_list())
    return std::any_of(std::begin(list_ops), std::end(list_ops), [&](const char* o) { return name == o; });
  if (obj.is_dict())
    return std::any_of(std::begin(dict_ops), std::end(dict_ops), [&](const char* o) { return name == o; });
  return false;
}

std::string type_object(const Value& v) { return v.type_name() + " object"; }

}  // namespace

// ---- arithmetic helpers shared with the renderer ---------------------------------------------

Value add(Env& env, const Value& x, const Value& y) {
  if (x.is_number() && y.is_number()) {
    if (x.is_float() || y.is_float()) return Value(x.number() + y.number());
    std::int64_t r;
    if (__builtin_add_overflow(x.integer(), y.integer(), &r)) fail("integer overflow in +");
    return Value(r);
  }
  if (x.is_string() && y.is_string()) {
    const std::uint64_t bytes = x.str_ref().size() + y.str_ref().size();
    if (bytes > env.max_text()) fail_text_size(bytes, env.max_text());
    return Value(x.str_ref() + y.str_ref());
  }
  if (x.is_list() && y.is_list() && x.is_tuple() == y.is_tuple()) {
    const std::size_t items = x.list().size() + y.list().size();
    if (items > env.max_items()) fail_list_size(items, env.max_items());
    List out;
    out.reserve(items);
    out.insert(out.end(), x.list().begin(), x.list().end());
    out.insert(out.end(), y.list().begin(), y.list().end());
    return Value(std::make_shared<List>(std::move(out)), x.is_tuple());
  }
  if (x.is_undefined() || y.is_undefined())
    fail((x.is_undefined() ? x : y).undefined_message());
  fail("unsupported operand type(s) for +: '" + x.type_name() + "' and '" + y.type_name() + "'");
}

bool contains(const Value& container, const Value& item, Meter& m) {
  if (container.is_string()) {
    if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + item.type_name());
    m.charge(container.str_ref().size() + item.str_ref().size() + 1);
    return container.str_ref().find(item.str_ref()) != std::string::npos;
  }
  if (container.is_list())
    return std::any_of(container.list().begin(), container.list().end(), [&](const Value& x) { return equal(x, item, m); });
  const Dict* keys = container.is_dict() ? &container.dict() : container.is_namespace() ? &container.ns().attrs : nullptr;
  if (keys) {
    m.charge(keys->size() + 1);  // Dict::find reads the keys in turn
    return item.is_string() && keys->find(item.str_ref()) != nullptr;
  }
  if (container.is_undefined()) return false;
  fail("argument of type '" + container.type_name() + "' is not iterable");
}


Value get_attribute(Env& env, const Value& obj, const std::string& name) {
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_')
    fail("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe");
  if (obj.is_undefined()) fail(obj.undefined_message());
  if (is_mutating(obj, name))
    fail("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe (templates cannot change their inputs)");
  if (obj.is_string()) return string_method(env, obj, name);
  if (obj.is_dict()) {
    Value m = dict_method(obj, name);
    if (m.is_function()) return m;
    if (const Value* v = obj.dict().find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_list()) {
    Value m = list_method(env, obj, name);
    if (m.is_function()) return m;
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.ns().attrs.find(name)) return *v;
  }
  return Value::undefined("'" + type_object(obj) + "' has no attribute '" + name + "'");
}

Value get_item(Env& env, const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail(obj.undefined_message());
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str_ref())) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const bool is_str = obj.is_string();
    // A string's code points are counted and walked, not tabulated: no 8 bytes per byte.
    const auto n = static_cast<std::int64_t>(is_str ? code_point_count(obj.str_ref()) : obj.list().size());
    std::int64_t i = key.integer();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (!is_str) return obj.list()[static_cast<std::size_t>(i)];
      const std::string& s = obj.str_ref();
      std::size_t at = 0;
      for (std::int64_t k = 0; k < i && at < s.size(); ++k) decode_code_point(s, at);
      if (at < s.size()) {  // always, for valid UTF-8 (every string here is)
        std::size_t end = at;
        decode_code_point(s, end);
        return Value(s.substr(at, end - at));
      }
    }
    return Value::undefined(type_object(obj) + " has no element " + std::to_string(key.integer()));
  }
  if (key.is_string()) return get_attribute(env, obj, key.str_ref());
  return Value::undefined(type_object(obj) + " has no element " + excerpt(key));
}

std::uint64_t weight(const List& items) { return items.size() * sizeof(Value) + 1; }

std::uint64_t weight(const Value& v) {
  constexpr std::uint64_t entry = sizeof(std::string) + sizeof(Value);
  if (v.is_string()) return v.str_ref().size() + 1;
  if (v.is_list()) return weight(v.list());
  if (v.is_dict()) return v.dict().size() * entry + 1;
  return 1;
}

std::uint64_t weight(const Args& a) {
  std::uint64_t w = 0;
  for (const Value& v : a.pos) w += weight(v);
  for (const auto& kv : a.kw) w += weight(kv.second);
  return w;
}

void check_size(const Env& env, const Value& v) {
  if (v.is_string() && v.str_ref().size() > env.max_text()) fail_text_size(v.str_ref().size(), env.max_text());
  if (v.is_list() && v.list().size() > env.max_items()) fail_list_size(v.list().size(), env.max_items());
}

void add_globals(Dict& g, Env& env) {
  g.set("range", bound("range", [](Args& a) {
          std::int64_t start = 0, stop, step = 1;
          for (const Value& v : a.pos)
            if (!v.is_int() && !v.is_bool()) fail("range() expects integers, found " + v.type_name());
          if (a.pos.size() > 3) fail("range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
          if (a.pos.size() == 1) stop = a.pos[0].integer();
          else if (a.pos.size() >= 2) {
            start = a.pos[0].integer();
            stop = a.pos[1].integer();
            if (a.pos.size() > 2) step = a.pos[2].integer();
          } else fail("range expected at least 1 argument, got 0");
          if (step == 0) fail("range() arg 3 must not be zero");
          const long double count = step > 0 ? (stop > start ? (static_cast<long double>(stop) - start + step - 1) / step : 0)
                                              : (stop < start ? (static_cast<long double>(start) - stop - step - 1) / -static_cast<long double>(step) : 0);
          // Jinja2's sandbox refuses ranges over MAX_RANGE (100000) items.
          if (count > 100000) fail("range too big: the sandbox blocks ranges larger than 100000 items");
          // start + k step in unsigned (wrapping) arithmetic: every item is in range, but a running
          // i += step can step past the int64 limits after the last one, and k step alone can too.
          const auto n = static_cast<std::uint64_t>(count);
          List out;
          out.reserve(n);
          for (std::uint64_t k = 0; k < n; ++k)
            out.emplace_back(static_cast<std::int64_t>(static_cast<std::uint64_t>(start) + k * static_cast<std::uint64_t>(step)));
          return make_list(std::move(out));
        }));
  g.set("namespace", bound("namespace", [&env](Args& a) {
          auto ns = std::make_shared<Namespace>();
          env.adopt(ns);
          for (const Value& p : a.pos) {
            if (!p.is_dict()) fail("namespace() takes keyword arguments or a dict");
            for (const auto& [k, v] : p.dict().items()) ns->attrs.set(k, v);
          }
          for (const auto& [k, v] : a.kw) ns->attrs.set(k, v);
          return Value(ns);
        }));
  g.set("dict", bound("dict", [](Args& a) {
          auto d = std::make_shared<Dict>();
          for (const auto& [k, v] : a.kw) d->set(k, v);
          return Value(d);
        }));
  // Its text is the template's (or the data's) own: the renderer makes it printable and short
  // when it becomes the error line (render.cpp, located).
  g.set("raise_exception", bound("raise_exception", [&env](Args& a) -> Value {
          fail(a.pos.empty() ? std::string("raise_exception called") : a.pos[0].str(env));
        }));
  g.set("strftime_now", bound("strftime_now", [&env](Args& a) {
          const auto fmt = arg_str(a, 0, "format");
          if (!fmt) fail("strftime_now() needs a format");
          const std::time_t t = env.now();
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[512];
          const std::size_t n = std::strftime(buf, sizeof buf, fmt->c_str(), &tm);
          return Value(std::string(buf, n));
        }));
}

}  // namespace ctune::tmpl
