// Jinja2's built-in filters, tests and globals, the Python methods templates call on strings,
// dicts and lists, and attribute/item access with the immutable sandbox's rules. Each behaves
// as its Jinja2 3.1 / Python counterpart; where one departs, docs/chat-templates.md says so.
#pragma once

#include <ctime>
#include <optional>
#include <string>

#include "template/template.h"
#include "template/value.h"

namespace ctune::tmpl {

// What built-ins need from the renderer: other filters and tests by name (map, select...), the
// limits, the work meter (meter.h), and the clock of strftime_now.
class Env : public Meter {
 public:
  virtual Value filter(const std::string& name, const Value& v, Args& args) = 0;
  virtual bool test(const std::string& name, const Value& v, Args& args) = 0;
  virtual Value call(const Value& callee, Args& args) = 0;
  virtual const Limits& limits() const = 0;
  std::size_t max_text() const override { return limits().max_output_bytes; }
  std::size_t max_items() const override { return limits().max_items; }
  virtual std::time_t now() const = 0;
  // A namespace() made by this render. The render empties each one when it ends: namespaces are
  // the only values a template can change, so the only ones that can hold themselves
  // ({% set ns.self = ns %}), a cycle of shared pointers that would otherwise never be freed.
  virtual void adopt(const NamespacePtr& ns) = 0;
};

// nullopt when there is no such filter/test (the renderer reports the name and position).
std::optional<Value> apply_filter(Env& env, const std::string& name, const Value& v, Args& args);
std::optional<bool> apply_test(Env& env, const std::string& name, const Value& v, Args& args);

// `obj.name`: a Python method bound to `obj` (str.strip, dict.items...), a dict item, a
// namespace attribute; an undefined value (with Jinja2's message as hint) when missing.
// EvalError for internal attributes (`__class__`) and for methods the immutable sandbox refuses
// (list.append, dict.update...).
Value get_attribute(Env& env, const Value& obj, const std::string& name);
// `obj[key]`: list/str index (negative from the end), dict item; falls back to attributes for a
// string key, as Jinja2's sandbox does; undefined when missing.
Value get_item(Env& env, const Value& obj, const Value& key);

// Python's `x + y` (numbers, str, list), a str or list checked against the limits before it is
// built, and `item in container` (charged what it reads); EvalError as Python's TypeError.
Value add(Env& env, const Value& x, const Value& y);
bool contains(const Value& container, const Value& item, Meter& m);

// range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict& globals, Env& env);

// EvalError when a string or list passes its limit (Limits::max_output_bytes, max_items).
void check_size(const Env& env, const Value& v);
// What an operation reading or building `v` is charged: its bytes (a string's, a list's or dict's
// items as stored); 1 for a scalar.
std::uint64_t weight(const Value& v);
std::uint64_t weight(const Args& a);  // of every argument
std::uint64_t weight(const List& items);

}  // namespace ctune::tmpl
