// The values a chat template computes with, as Python's Jinja2 sees them: undefined, None, bool,
// int, float, str, list (tuples too), dict (insertion-ordered, string keys), callables (filters
// bound as methods, macros, globals) and namespace() objects. Lists and dicts are shared, as
// Python objects are; the engine never mutates a list or dict after building it (Hugging Face
// renders in Jinja2's immutable sandbox), only namespace attributes change.
//
// Printing follows Python: str() of a value is what `{{ x }}` writes (None -> "None", True ->
// "True", 2.0 -> "2.0", a list -> its repr "['a', 1]"), so templates that print non-strings give
// the bytes transformers gives. Strings are UTF-8; lengths, indices and slices count code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/json.h"
#include "template/meter.h"

namespace ctune::tmpl {

class Value;
struct Args;
using List = std::vector<Value>;
using ListPtr = std::shared_ptr<List>;

// Insertion-ordered string-keyed map (Python's dict as chat templates use it).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  // Inserts or replaces, keeping the first insertion's position.
  void set(std::string key, Value value);
  // Appends a key the dict does not hold yet (building a fresh dict: no search).
  void append(std::string key, Value value);
  void reserve(std::size_t n) { items_.reserve(n); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  std::size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};
using DictPtr = std::shared_ptr<Dict>;

// A callable: built-ins get their arguments evaluated; `name` is for messages.
struct Function {
  std::string name;
  std::function<Value(Args&)> call;
};
using FunctionPtr = std::shared_ptr<Function>;

// A namespace() object: a dict whose attributes `{% set ns.x = ... %}` may change.
struct Namespace {
  Dict attrs;
};
using NamespacePtr = std::shared_ptr<Namespace>;

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, function, ns };

  Value() = default;  // undefined
  // Releasing the last reference to a container frees its contents iteratively, not one stack
  // frame per nesting level: a loop can nest a list 10^6 deep (docs/chat-templates.md#limits).
  ~Value();
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value& other) {
    Value copy(other);
    return *this = std::move(copy);
  }
  Value& operator=(Value&& other) noexcept {
    if (this == &other) return *this;
    Value old(std::move(*this));  // the previous contents go through ~Value
    data_ = std::move(other.data_);
    tuple_ = other.tuple_;
    hint_ = std::move(other.hint_);
    return *this;
  }
  static Value none() { return Value(Kind::none); }
  Value(bool b) : data_(b) {}  // NOLINT: implicit like Python's literals
  Value(std::int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<std::int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : data_(std::make_shared<const std::string>(s)) {}
  Value(ListPtr l, bool tuple = false) : data_(std::move(l)), tuple_(tuple) {}
  Value(DictPtr d) : data_(std::move(d)) {}
  Value(FunctionPtr f) : data_(std::move(f)) {}
  Value(NamespacePtr n) : data_(std::move(n)) {}
  // An undefined value that carries Jinja2's message for its use ("'x' is undefined", "'dict
  // object' has no attribute 'y'", "No first item, sequence was empty.").
  static Value undefined(std::string message);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_string() const { return std::holds_alternative<StrPtr>(data_); }
  bool is_list() const { return std::holds_alternative<ListPtr>(data_); }
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_dict() const { return std::holds_alternative<DictPtr>(data_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_function() const { return std::holds_alternative<FunctionPtr>(data_); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(data_); }

  const std::string& str_ref() const { return *std::get<StrPtr>(data_); }
  const List& list() const { return *std::get<ListPtr>(data_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(data_); }
  const Dict& dict() const { return *std::get<DictPtr>(data_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(data_); }
  const Function& function() const { return *std::get<FunctionPtr>(data_); }
  Namespace& ns() const { return *std::get<NamespacePtr>(data_); }
  bool boolean() const { return std::get<bool>(data_); }
  std::int64_t integer() const;  // int or bool
  double number() const;         // int, bool or float
  // What using this undefined value raises; "'value' is undefined" when it carries no message.
  std::string undefined_message() const;

  // Python's bool(x); undefined is false.
  bool truthy() const;
  // Python's str(x) (what {{ x }} prints); undefined prints "". Built under the meter's output
  // limit: a list holding one 30 MB string 10^6 times would print 30 TB.
  std::string str(const Meter& m) const;
  // Python's repr(x), used inside printed lists and dicts.
  std::string repr(const Meter& m) const;
  // Python's type name for messages ("str", "int", "list", "dict", "NoneType", "undefined").
  std::string type_name() const;
  // Number of items: len() of a str (code points), list or dict; undefined is 0.
  std::optional<std::size_t> length() const;

 private:
  explicit Value(Kind k);
  // Strings are shared like Python's immutable str: copying a value (a message's content into a
  // loop variable, a list, a sentinel variant of a conversation) copies a pointer, not the text.
  using StrPtr = std::shared_ptr<const std::string>;
  std::variant<std::monostate, std::nullptr_t, bool, std::int64_t, double, StrPtr, ListPtr, DictPtr,
               FunctionPtr, NamespacePtr>
      data_;
  bool tuple_ = false;
  // Shared, and null but for undefined values: every value is copied often (a list repeated, a
  // loop's items), and a std::string member made each copy a string copy.
  std::shared_ptr<const std::string> hint_;
};

// The arguments of a call: positional, then keyword (in call order).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position `index` or named `name`; nullptr when absent.
  const Value* get(std::size_t index, std::string_view name) const;
};

// Python's ==, and the ordering of <, <= ... (numbers with numbers, str with str, lists
// lexicographically); nullopt when Python would raise TypeError. Each charges `m` the bytes it
// compares, as it goes (meter.h). A string, list or dict is equal to itself without being read,
// as Python's identity shortcut makes it.
bool equal(const Value& a, const Value& b, Meter& m);
std::optional<int> compare(const Value& a, const Value& b, Meter& m);
// Python's hash(x), consistent with equal (1, 1.0 and True hash alike), charging the bytes it
// reads; EvalError for what Python cannot hash (lists, dicts).
std::size_t hash(const Value& v, Meter& m);
// repr(v) cut after a few hundred bytes: a value named in an error message.
std::string excerpt(const Value& v);
// `text` as an error line may show it: what a terminal would obey (control characters, line
// breaks, bidirectional overrides) escaped as Python's repr escapes it, and at most `max_bytes`
// bytes of it, cut with "..." (a template's raise_exception can pass any string).
std::string printable_excerpt(std::string_view text, std::size_t max_bytes);

// JSON (a dataset record, tool schemas, template variables from a recipe) as template values;
// integers stay integers. Key order: an OrderedJson keeps the file's (what Python's json.loads
// gives, and what tojson prints back); a Json's keys are sorted.
Value from_json(const Json& j);
Value from_json(const OrderedJson& j);
// Python's json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=...) as transformers'
// tojson filter calls it; `separators` default like Python's: (", ", ": ") without indent,
// ("," , ": ") with it. Returns nullopt and sets `bad` to the type name for values JSON cannot
// hold (undefined, functions). Built under the meter's output limit.
std::optional<std::string> to_json(const Value& v, std::optional<int> indent, bool sort_keys,
                                   std::optional<std::pair<std::string, std::string>> separators, std::string& bad,
                                   bool ensure_ascii, const Meter& m);

// Python's repr() of a float ("0.5", "2.0", "1e+16", "inf").
std::string float_repr(double d);
// Python's repr() of a str (quotes chosen as Python chooses them).
std::string string_repr(std::string_view s);

}  // namespace ctune::tmpl
