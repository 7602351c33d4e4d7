// Template values with Python's printing, equality and ordering; see value.h.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "template/pystr.h"

namespace ctune::tmpl {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(std::move(key), std::move(value));
}

void Dict::append(std::string key, Value value) { items_.emplace_back(std::move(key), std::move(value)); }

const Value* Args::get(std::size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

namespace {

// Set by ~Graveyard. Being trivially destructible, it can still be read by a Value destroyed
// after the graveyard (a static one, after the thread's thread_locals at exit), which then frees
// its contents the plain way.
thread_local bool graveyard_gone = false;

// Containers whose last reference a ~Value released, waiting to be freed by the outermost one.
// Freeing one runs its items' ~Value, which only queue theirs: the stack stays one level deep
// however deep the value nests.
struct Graveyard {
  std::vector<std::shared_ptr<void>> pending;
  bool draining = false;
  Graveyard() = default;
  ~Graveyard() { graveyard_gone = true; }
  Graveyard(const Graveyard&) = delete;
  Graveyard& operator=(const Graveyard&) = delete;
};
thread_local Graveyard graveyard;

// Printing, comparing and serialising recurse once per nesting level of the value; a value is
// refused past this depth (Python raises RecursionError near 1000, and repr of a namespace that
// holds itself would never end).
constexpr int kMaxValueDepth = 1000;
thread_local int value_depth = 0;
struct Nested {
  Nested() {
    if (++value_depth > kMaxValueDepth) {
      --value_depth;
      throw EvalError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels (or containing itself)");
    }
  }
  ~Nested() { --value_depth; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

}  // namespace

Value::~Value() {
  if (data_.valueless_by_exception() || graveyard_gone) return;
  const bool queued = std::visit(
      [](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, ListPtr> || std::is_same_v<P, DictPtr> || std::is_same_v<P, NamespacePtr> ||
                      std::is_same_v<P, FunctionPtr>) {
          if (p && p.use_count() == 1) {
            graveyard.pending.push_back(std::move(p));
            return true;
          }
        }
        return false;
      },
      data_);
  if (!queued || graveyard.draining) return;
  graveyard.draining = true;
  while (!graveyard.pending.empty()) {
    std::shared_ptr<void> last = std::move(graveyard.pending.back());
    graveyard.pending.pop_back();
    last.reset();  // may queue more
  }
  graveyard.draining = false;
}

Value::Value(Kind k) {
  if (k == Kind::none) data_ = nullptr;
}

Value Value::undefined(std::string message) {
  Value v;
  v.hint_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

Value::Kind Value::kind() const {
  switch (data_.index()) {
    case 0: return Kind::undefined;
    case 1: return Kind::none;
    case 2: return Kind::boolean;
    case 3: return Kind::integer;
    case 4: return Kind::floating;
    case 5: return Kind::string;
    case 6: return Kind::list;
    case 7: return Kind::dict;
    case 8: return Kind::function;
    default: return Kind::ns;
  }
}

std::string Value::undefined_message() const { return hint_ && !hint_->empty() ? *hint_ : "'value' is undefined"; }

std::int64_t Value::integer() const { return is_bool() ? (boolean() ? 1 : 0) : std::get<std::int64_t>(data_); }

double Value::number() const { return is_float() ? std::get<double>(data_) : static_cast<double>(integer()); }

bool Value::truthy() const {
  switch (kind()) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return boolean();
    case Kind::integer: return integer() != 0;
    case Kind::floating: return number() != 0.0;
    case Kind::string: return !str_ref().empty();
    case Kind::list: return !list().empty();
    case Kind::dict: return dict().size() > 0;
    default: return true;
  }
}

std::optional<std::size_t> Value::length() const {
  switch (kind()) {
    case Kind::undefined: return 0;
    case Kind::string: return code_point_count(str_ref());
    case Kind::list: return list().size();
    case Kind::dict: return dict().size();
    case Kind::ns: return ns().attrs.size();
    default: return std::nullopt;
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::undefined: return "undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return tuple_ ? "tuple" : "list";
    case Kind::dict: return "dict";
    case Kind::function: return "function";
    default: return "Namespace";
  }
}

namespace {

void write_repr(TextBuilder& out, const Value& v);
void append_string_repr(TextBuilder& out, std::string_view s);

void write_dict_repr(TextBuilder& out, const Dict& d) {
  const Nested level;
  out.append('{');
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (out.full()) return;
    if (!first) out.append(", ");
    first = false;
    append_string_repr(out, k);
    out.append(": ");
    write_repr(out, v);
  }
  out.append('}');
}

// Items are written into one builder, each checked before it is appended: a list of 10^6
// references to one 30 MB string stops at the output limit instead of building 30 TB.
void write_repr(TextBuilder& out, const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined: out.append("Undefined"); return;
    case K::none: out.append("None"); return;
    case K::boolean: out.append(v.boolean() ? "True" : "False"); return;
    case K::integer: out.append(std::to_string(v.integer())); return;
    case K::floating: out.append(float_repr(v.number())); return;
    case K::string: append_string_repr(out, v.str_ref()); return;
    case K::list: {
      const Nested level;
      out.append(v.is_tuple() ? '(' : '[');
      const List& l = v.list();
      for (std::size_t i = 0; i < l.size() && !out.full(); ++i) {
        if (i) out.append(", ");
        write_repr(out, l[i]);
      }
      if (v.is_tuple() && l.size() == 1) out.append(',');
      out.append(v.is_tuple() ? ')' : ']');
      return;
    }
    case K::dict: write_dict_repr(out, v.dict()); return;
    case K::function: out.append("<function " + v.function().name + ">"); return;
    case K::ns:
      out.append("<Namespace ");
      write_dict_repr(out, v.ns().attrs);
      out.append('>');
      return;
  }
}

// Python's repr escape of one code point (quotes aside), or nullopt when it prints as itself.
std::optional<std::string> escaped(std::uint32_t cp) {
  if (cp == '\\') return "\\\\";
  if (cp == '\n') return "\\n";
  if (cp == '\r') return "\\r";
  if (cp == '\t') return "\\t";
  if (is_printable(cp)) return std::nullopt;
  char buf[16];
  if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
  else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
  return std::string(buf);
}

void append_string_repr(TextBuilder& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.append(quote);
  std::size_t i = 0, run = 0;  // [run, i): characters that print as themselves, appended at once
  while (i < s.size() && !out.full()) {
    const char c = s[i];
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != quote) {  // printable ASCII: most text, at once
      ++i;
      continue;
    }
    const std::size_t at = i;
    const std::uint32_t cp = decode_code_point(s, i);
    const std::optional<std::string> escape =
        cp == static_cast<std::uint32_t>(quote) ? std::string("\\") + quote : escaped(cp);
    if (!escape) continue;
    out.append(s.substr(run, at - run));
    out.append(*escape);
    run = i;
  }
  if (run < s.size()) out.append(s.substr(run));
  out.append(quote);
}

}  // namespace

std::string Value::str(const Meter& m) const {
  if (is_string()) return str_ref();
  if (is_undefined()) return "";
  return repr(m);
}

std::string Value::repr(const Meter& m) const {
  TextBuilder out(m.max_text());
  write_repr(out, *this);
  return out.take();
}

std::string excerpt(const Value& v) {
  TextBuilder out = TextBuilder::excerpt(200);
  write_repr(out, v);
  return out.take();
}

std::string printable_excerpt(std::string_view text, std::size_t max_bytes) {
  TextBuilder out = TextBuilder::excerpt(max_bytes);
  std::size_t i = 0, run = 0;
  while (i < text.size() && !out.full()) {
    const std::size_t at = i;
    const std::uint32_t cp = decode_code_point(text, i);
    if (cp == '\\' || is_printable(cp)) continue;  // a backslash stays one: this is no repr
    out.append(text.substr(run, at - run));
    out.append(*escaped(cp));
    run = i;
  }
  if (run < text.size()) out.append(text.substr(run));
  return out.take();
}

bool equal(const Value& a, const Value& b, Meter& m) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  m.charge(1);
  switch (a.kind()) {
    case K::undefined:
    case K::none: return true;
    case K::string: {
      const std::string &x = a.str_ref(), &y = b.str_ref();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      m.charge(x.size());
      return x == y;
    }
    case K::list: {
      if (a.list_ptr() == b.list_ptr()) return true;
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      const Nested level;
      for (std::size_t i = 0; i < a.list().size(); ++i)
        if (!equal(a.list()[i], b.list()[i], m)) return false;
      return true;
    }
    case K::dict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      if (a.dict().size() != b.dict().size()) return false;
      const Nested level;
      for (const auto& [k, v] : a.dict().items()) {
        m.charge(b.dict().size());  // Dict::find reads the keys in turn
        const Value* w = b.dict().find(k);
        if (!w || !equal(v, *w, m)) return false;
      }
      return true;
    }
    case K::function: return &a.function() == &b.function();
    case K::ns: return &a.ns() == &b.ns();
    default: return false;
  }
}

std::optional<int> compare(const Value& a, const Value& b, Meter& m) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.integer() < b.integer() ? -1 : a.integer() > b.integer() ? 1 : 0;
    const double x = a.number(), y = b.number();
    if (std::isnan(x) || std::isnan(y)) return std::nullopt;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    m.charge(std::min(a.str_ref().size(), b.str_ref().size()) + 1);
    const int c = a.str_ref().compare(b.str_ref());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const Nested level;
    const List &x = a.list(), &y = b.list();
    for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (equal(x[i], y[i], m)) continue;
      return compare(x[i], y[i], m);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return std::nullopt;
}

std::size_t hash(const Value& v, Meter& m) {
  using K = Value::Kind;
  const auto mix = [](std::size_t h, std::size_t x) { return h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); };
  switch (v.kind()) {
    case K::undefined: return 0x5eed;  // Jinja2's Undefined objects are all equal
    case K::none: return 0;
    case K::boolean:
    case K::integer: return std::hash<std::int64_t>()(v.integer());
    case K::floating: {
      const double d = v.number();  // an integral float hashes as the int it equals (1.0 == 1)
      if (d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63) return std::hash<std::int64_t>()(static_cast<std::int64_t>(d));
      return std::hash<double>()(d);
    }
    case K::string:
      m.charge(v.str_ref().size() + 1);
      return std::hash<std::string_view>()(v.str_ref());
    case K::list: {
      if (!v.is_tuple()) break;
      const Nested level;
      std::size_t h = v.list().size();
      for (const Value& x : v.list()) h = mix(h, hash(x, m));
      return h;
    }
    case K::function: return std::hash<const void*>()(&v.function());
    case K::ns: return std::hash<const void*>()(&v.ns());
    default: break;
  }
  throw EvalError("unhashable type: '" + v.type_name() + "'");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits and exponent, then Python's layout: exponent form when the
  // decimal point would sit more than 16 digits right or 4 zeros left of the digits.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int ae = std::abs(exponent);
    out += std::string("e") + (exponent < 0 ? "-" : "+") + (ae < 10 ? "0" : "") + std::to_string(ae);
    return out;
  }
  const int n = static_cast<int>(digits.size());
  if (decpt <= 0) return sign + "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
  if (decpt >= n) return sign + digits + std::string(static_cast<std::size_t>(decpt - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
}

std::string string_repr(std::string_view s) {
  TextBuilder out(SIZE_MAX);
  append_string_repr(out, s);
  return out.take();
}

namespace {

// Python's json escape of one byte or (ensure_ascii) code point at s[i], advancing i past it;
// nullopt when it is written as it is.
std::optional<std::string> json_escape(std::string_view s, std::size_t& i, bool ensure_ascii) {
  const char c = s[i];
  char buf[16];
  if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {  // \uXXXX, surrogate pairs past the BMP
    std::uint32_t cp = decode_code_point(s, i);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    return std::string(buf);
  }
  ++i;
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default:
      if (static_cast<unsigned char>(c) >= 0x20) return std::nullopt;
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      return std::string(buf);
  }
}

void json_string(TextBuilder& out, std::string_view s, bool ensure_ascii) {
  out.append('"');
  std::size_t i = 0, run = 0;  // [run, i): bytes written as they are, appended at once
  while (i < s.size()) {
    const std::size_t at = i;
    const std::optional<std::string> escape = json_escape(s, i, ensure_ascii);
    if (!escape) continue;
    out.append(s.substr(run, at - run));
    out.append(*escape);
    run = i;
  }
  out.append(s.substr(run));
  out.append('"');
}

// Writes into one builder, each piece checked before it is appended (separators and indents are
// the template's: tojson(separators=(s, ': ')) with a 30 MB s repeats it per item).
struct JsonWriter {
  std::optional<int> indent;
  bool sort_keys;
  bool ensure_ascii;
  std::string item_sep, key_sep;
  std::string bad;

  void newline(TextBuilder& out, int level) const {
    out.append('\n');
    const auto spaces = static_cast<std::size_t>(*indent * level);
    out.expect(spaces);
    out.append(std::string(spaces, ' '));
  }

  bool write(TextBuilder& out, const Value& v, int level) {
    using K = Value::Kind;
    const Nested nested;
    switch (v.kind()) {
      case K::none: out.append("null"); return true;
      case K::boolean: out.append(v.boolean() ? "true" : "false"); return true;
      case K::integer: out.append(std::to_string(v.integer())); return true;
      case K::floating: {
        const double d = v.number();
        out.append(std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d));
        return true;
      }
      case K::string: json_string(out, v.str_ref(), ensure_ascii); return true;
      case K::list: {
        const List& l = v.list();
        if (l.empty()) {
          out.append("[]");
          return true;
        }
        out.append('[');
        for (std::size_t i = 0; i < l.size(); ++i) {
          if (i) out.append(item_sep);
          if (indent) newline(out, level + 1);
          if (!write(out, l[i], level + 1)) return false;
        }
        if (indent) newline(out, level);
        out.append(']');
        return true;
      }
      case K::dict:
      case K::ns: {
        const Dict& d = v.is_dict() ? v.dict() : v.ns().attrs;
        if (!v.is_dict()) {
          bad = "Namespace";
          return false;
        }
        if (d.size() == 0) {
          out.append("{}");
          return true;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : d.items()) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out.append('{');
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out.append(item_sep);
          if (indent) newline(out, level + 1);
          json_string(out, items[i]->first, ensure_ascii);
          out.append(key_sep);
          if (!write(out, items[i]->second, level + 1)) return false;
        }
        if (indent) newline(out, level);
        out.append('}');
        return true;
      }
      default: bad = v.type_name(); return false;
    }
  }
};

}  // namespace

std::optional<std::string> to_json(const Value& v, std::optional<int> indent, bool sort_keys,
                                   std::optional<std::pair<std::string, std::string>> separators, std::string& bad,
                                   bool ensure_ascii, const Meter& m) {
  JsonWriter w{indent, sort_keys, ensure_ascii, indent ? "," : ", ", ": ", {}};
  if (separators) {
    w.item_sep = separators->first;
    w.key_sep = separators->second;
  }
  TextBuilder out(m.max_text());
  if (!w.write(out, v, 0)) {
    bad = w.bad;
    return std::nullopt;
  }
  return out.take();
}

template <class J>
Value from_json_any(const J& j) {
  switch (j.type()) {
    case J::value_t::null: return Value::none();
    case J::value_t::boolean: return Value(j.template get<bool>());
    case J::value_t::number_integer: return Value(j.template get<std::int64_t>());
    case J::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<std::int64_t>(u));
    }
    case J::value_t::number_float: return Value(j.template get<double>());
    case J::value_t::string: return Value(j.template get<std::string>());
    case J::value_t::array: {
      auto l = std::make_shared<List>();
      l->reserve(j.size());
      for (const auto& x : j) l->push_back(from_json_any(x));
      return Value(l);
    }
    case J::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->reserve(j.size());
      for (const auto& [k, x] : j.items()) d->append(k, from_json_any(x));  // JSON object keys are unique
      return Value(d);
    }
    default: return Value();
  }
}

Value from_json(const Json& j) { return from_json_any(j); }
Value from_json(const OrderedJson& j) { return from_json_any(j); }

}  // namespace ctune::tmpl
