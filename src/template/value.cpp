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

std::string dict_repr(const Dict& d) {
  const Nested level;
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (!first) out += ", ";
    first = false;
    out += string_repr(k) + ": " + v.repr();
  }
  return out + "}";
}

}  // namespace

std::string Value::str() const {
  switch (kind()) {
    case Kind::undefined: return "";
    case Kind::string: return str_ref();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "None";
    case Kind::boolean: return boolean() ? "True" : "False";
    case Kind::integer: return std::to_string(integer());
    case Kind::floating: return float_repr(number());
    case Kind::string: return string_repr(str_ref());
    case Kind::list: {
      const Nested level;
      std::string out = tuple_ ? "(" : "[";
      const List& l = list();
      for (std::size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + l[i].repr();
      if (tuple_ && l.size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::dict: return dict_repr(dict());
    case Kind::function: return "<function " + function().name + ">";
    default: return "<Namespace " + dict_repr(ns().attrs) + ">";
  }
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.str_ref() == b.str_ref();
    case K::list: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      const Nested level;
      for (std::size_t i = 0; i < a.list().size(); ++i)
        if (!equal(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case K::dict: {
      if (a.dict().size() != b.dict().size()) return false;
      const Nested level;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* w = b.dict().find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    }
    case K::function: return &a.function() == &b.function();
    case K::ns: return &a.ns() == &b.ns();
    default: return false;
  }
}

std::optional<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.integer() < b.integer() ? -1 : a.integer() > b.integer() ? 1 : 0;
    const double x = a.number(), y = b.number();
    if (std::isnan(x) || std::isnan(y)) return std::nullopt;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str_ref().compare(b.str_ref());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const Nested level;
    const List &x = a.list(), &y = b.list();
    for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (equal(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return std::nullopt;
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
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t start = i;
    const std::uint32_t cp = decode_code_point(s, i);
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<std::uint32_t>(quote)) out += std::string("\\") + quote;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (!is_printable(cp)) {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  return out + quote;
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {  // \uXXXX, surrogate pairs past the BMP
      std::uint32_t cp = decode_code_point(s, i);
      --i;
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  std::optional<int> indent;
  bool sort_keys;
  bool ensure_ascii;
  std::string item_sep, key_sep;
  std::string bad;

  void newline(std::string& out, int level) const {
    out += '\n';
    out.append(static_cast<std::size_t>(*indent * level), ' ');
  }

  bool write(std::string& out, const Value& v, int level) {
    using K = Value::Kind;
    const Nested nested;
    switch (v.kind()) {
      case K::none: out += "null"; return true;
      case K::boolean: out += v.boolean() ? "true" : "false"; return true;
      case K::integer: out += std::to_string(v.integer()); return true;
      case K::floating: {
        const double d = v.number();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
        return true;
      }
      case K::string: json_string(out, v.str_ref(), ensure_ascii); return true;
      case K::list: {
        const List& l = v.list();
        if (l.empty()) {
          out += "[]";
          return true;
        }
        out += '[';
        for (std::size_t i = 0; i < l.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(out, level + 1);
          if (!write(out, l[i], level + 1)) return false;
        }
        if (indent) newline(out, level);
        out += ']';
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
          out += "{}";
          return true;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : d.items()) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(out, level + 1);
          json_string(out, items[i]->first, ensure_ascii);
          out += key_sep;
          if (!write(out, items[i]->second, level + 1)) return false;
        }
        if (indent) newline(out, level);
        out += '}';
        return true;
      }
      default: bad = v.type_name(); return false;
    }
  }
};

}  // namespace

std::optional<std::string> to_json(const Value& v, std::optional<int> indent, bool sort_keys,
                                   std::optional<std::pair<std::string, std::string>> separators, std::string& bad,
                                   bool ensure_ascii) {
  JsonWriter w{indent, sort_keys, ensure_ascii, indent ? "," : ", ", ": ", {}};
  if (separators) {
    w.item_sep = separators->first;
    w.key_sep = separators->second;
  }
  std::string out;
  if (!w.write(out, v, 0)) {
    bad = w.bad;
    return std::nullopt;
  }
  return out;
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
