// Helpers the built-in filters, tests and methods share (filters.cpp, builtins.cpp): argument
// access by position or keyword with Python-style type errors, Python's iteration of a value,
// bound methods, case folding. Internal to src/template.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "template/value.h"

namespace ctune::tmpl::builtin {

[[noreturn]] void fail(const std::string& what);
const Value* arg(const Args& a, std::size_t i, std::string_view name);
bool arg_bool(const Args& a, std::size_t i, std::string_view name, bool dflt);
std::int64_t arg_int(const Args& a, std::size_t i, std::string_view name, std::int64_t dflt);
// A slice bound: absent or None -> nullopt; an int; anything else Python's TypeError.
std::optional<std::int64_t> arg_index(const Args& a, std::size_t i, std::string_view name);
std::optional<std::string> arg_str(const Args& a, std::size_t i, std::string_view name);
const std::string& need_str(const Value& v, const char* what);
Value make_list(List items, bool tuple = false);
// The items a `for` loop or a list-taking filter sees: list items, dict keys, string code points
// (a string of more code points than a list may hold items is refused before it is split).
List iterate(const Meter& m, const Value& v);
Value bound(std::string name, std::function<Value(Args&)> f);
// A string lower-cased unless case_sensitive (Jinja2's ignore_case), charged its bytes; other
// values as they are.
Value folded(const Value& v, bool case_sensitive, Meter& m);
// str.replace (the method and the filter), its result's size checked before it is built: each of
// 10^6 matches replaced by a 30 MB string would be 30 TB.
Value checked_replace(const Meter& m, std::string_view s, std::string_view old, std::string_view repl, std::int64_t count);
// compare() or Python's TypeError.
int ordered(const Value& a, const Value& b, Meter& m);

}  // namespace ctune::tmpl::builtin
