// A Jinja engine for chat templates: the subset of Jinja2 that real chat templates use, with
// the environment Hugging Face's apply_chat_template sets up (immutable sandbox, trim_blocks,
// lstrip_blocks, loop controls, raise_exception, strftime_now, tojson without HTML escaping,
// {% generation %} tracking). docs/chat-templates.md lists what is supported and where the
// engine departs from Jinja2.
//
// The sandbox: a template reads only the variables it is given; there is no file, environment
// or import access, and every render is bounded (loop iterations, macro depth, output and value
// size, range length). Exceeding a bound, a syntax error, an undefined value used in an
// operation or the template's own raise_exception all end in one TemplateError naming the
// template line and column.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ctune::tmpl {

// The largest template source accepted (real chat templates are a few KB, the largest ~20 KB).
inline constexpr std::size_t kMaxSourceBytes = 1u << 20;

struct Limits {
  std::size_t max_output_bytes = 32u << 20;  // the rendered text, and any one string value
  std::size_t max_items = 1u << 20;          // any one list value
  std::int64_t max_iterations = 1'000'000;   // loop iterations of one render, all loops together
  int max_depth = 100;                       // nested macro calls
  // The render's work, all operations together: each operation is charged the bytes of the
  // values it reads and builds (builtin::weight). The limits above bound each value and the
  // loops, but not a loop that builds or scans a large value on every iteration: 10^5
  // iterations of [0] * 10^6 would run for hours. Real chat templates spend 5-8 bytes per byte
  // of conversation (docs/chat-templates.md).
  std::uint64_t max_work = 1ull << 30;
};

struct RenderOptions {
  Limits limits;
  // What strftime_now() formats (local time); nullopt: the clock. Tests pin it.
  std::optional<std::time_t> now;
};

struct Rendered {
  std::string text;
  // Byte ranges [begin, end) of the output of {% generation %} blocks, in order.
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};

struct Program;  // the parsed template (ast.h)

class Template {
 public:
  // Parses `source` (TemplateError with line and column on a syntax error or invalid UTF-8).
  explicit Template(std::string source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `variables` as the global names (plus the built-in globals range, namespace,
  // dict, raise_exception, strftime_now).
  Rendered render(const Dict& variables, const RenderOptions& options = {}) const;

  // True when the source has {% generation %} blocks (assistant masks come from them).
  bool has_generation() const;
  const std::string& source() const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace ctune::tmpl
