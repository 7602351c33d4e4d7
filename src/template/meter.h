// What an operation on template values may read and build, as a render bounds it (template.h's
// Limits: max_work, max_output_bytes, max_items), and the error past a bound or any other failure
// of an operation. A list can hold one 30 MB string 10^6 times, sharing it,
// so no value's own size says what comparing, hashing or printing it takes. Those operations
// charge the bytes they read as they go (Meter), and every string an operation builds is checked
// before it grows (TextBuilder), so a hostile template ends at a limit in seconds instead of
// running for hours or allocating gigabytes first (docs/chat-templates.md, "The sandbox").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ctune::tmpl {

// Raised while evaluating (by built-ins and operators); the renderer adds the template position.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Meter {
 public:
  virtual ~Meter() = default;
  // Adds `units` (bytes read or built) to the render's work; EvalError past its limit.
  virtual void charge(std::uint64_t units) = 0;
  // The largest string an operation may build (Limits::max_output_bytes).
  virtual std::size_t max_text() const = 0;
  // The most items a list an operation builds may hold (Limits::max_items).
  virtual std::size_t max_items() const = 0;
};

// No limits: for values handled outside a render (tests, a value named in a message).
Meter& unmetered();

// EvalError saying that a string of `bytes` would pass the output limit `cap`, or a list of `items`
// the list limit: the one wording of each bound, whoever checks it.
[[noreturn]] void fail_text_size(std::uint64_t bytes, std::size_t cap);
[[noreturn]] void fail_list_size(std::size_t items, std::size_t cap);

// A string built under a cap, checked before each append.
class TextBuilder {
 public:
  // An append past `cap` bytes fails (fail_text_size).
  explicit TextBuilder(std::size_t cap) : cap_(cap) {}
  // An append past `cap` bytes ends the text there with "..." and sets full(): a value shown in an
  // error message, where part of it says enough.
  static TextBuilder excerpt(std::size_t cap);

  void append(std::string_view s);
  void append(char c) { append(std::string_view(&c, 1)); }
  // Fails now unless `more` bytes fit: an operation that knows its size before it builds.
  void expect(std::uint64_t more) const;
  // An excerpt that reached its cap: what follows is dropped, so a caller may stop reading.
  bool full() const { return full_; }
  std::size_t size() const { return out_.size(); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::size_t cap_;
  bool cut_ = false;
  bool full_ = false;
};

}  // namespace ctune::tmpl
