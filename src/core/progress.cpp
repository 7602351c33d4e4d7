// The live progress line; see progress.h.
#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace ctune {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

// Off a terminal, a long stage's plain line every 30 s; CTUNE_HEARTBEAT_SECONDS changes that
// (0: at every update, as the tests use it). Anything but a number >= 0 is a ConfigError.
Clock::duration heartbeat_every() {
  static const Clock::duration every = [] {
    const char* env = std::getenv("CTUNE_HEARTBEAT_SECONDS");
    double s = 30.0;
    if (env && *env) {
      char* end = nullptr;
      s = std::strtod(env, &end);
      if (*end != '\0' || !std::isfinite(s) || s < 0) {
        throw ConfigError("CTUNE_HEARTBEAT_SECONDS: expected a number of seconds >= 0, found \"" + std::string(env) + "\"");
      }
    }
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }();
  return every;
}

bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) != 0 && !(term && std::strcmp(term, "dumb") == 0);
}

// The terminal's width now (it may be resized mid-run); COLUMNS, then 80, where the ioctl
// knows none (a pseudo-terminal nobody sized).
int columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return 80;
}

std::size_t chars(const std::string& s) {  // UTF-8 code points
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The first `n` code points of `s`, or its last `n`.
std::string first_chars(const std::string& s, std::size_t n) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (seen++ == n) return s.substr(0, i);
  }
  return s;
}
std::string last_chars(const std::string& s, std::size_t n) {
  const std::size_t total = chars(s);
  if (total <= n) return s;
  std::size_t skip = total - n, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (skip-- == 0) break;
  }
  return s.substr(i);
}

// `head` + `tail` in at most `width` - 1 characters: a live line must never wrap, or the
// carriage return that redraws it would go back to its last row only (the last column stays
// free because some terminals wrap as soon as it is written). The head (a stage's label, often
// a path) gives way first, losing its middle ("loading /wo...progress/model"); then the tail's
// end goes.
std::string fit(const std::string& head, const std::string& tail, int width) {
  const std::size_t room = static_cast<std::size_t>(std::max(2, width) - 1);
  if (chars(head) + chars(tail) <= room) return head + tail;
  const std::size_t min_head = std::min<std::size_t>(chars(head), 20);
  const std::size_t for_head = chars(tail) + min_head <= room ? room - chars(tail) : min_head;
  std::string line = head;
  if (chars(head) > for_head) {
    const std::size_t first = for_head / 3, last = for_head > first + 3 ? for_head - first - 3 : 0;
    line = first_chars(head, first) + "..." + last_chars(head, last);
  }
  return first_chars(line + tail, room);
}

void write_stderr(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

// The screen's bottom line and the stages that may draw on it, innermost last. One per process:
// there is one stderr.
struct Terminal {
  std::mutex mu;
  std::vector<Stage*> stack;
  std::string shown;  // the live line on the screen now; empty: none
  const bool tty = stderr_is_terminal();

  static Terminal& get() {
    static Terminal t;
    return t;
  }
  void draw(const std::string& head, const std::string& tail) {  // with mu held
    shown = fit(head, tail, columns());
    write_stderr("\r" + shown + "\033[K");
  }
  void clear() {  // with mu held
    if (shown.empty()) return;
    write_stderr("\r\033[K");
    shown.clear();
  }
  void remove(Stage* s) {  // with mu held
    stack.erase(std::remove(stack.begin(), stack.end(), s), stack.end());
  }
  void redraw_top() {  // with mu held
    if (stack.empty() || !stack.back()->live_ || stack.back()->last_draw_ == Clock::time_point()) return;
    draw(stack.back()->head_, stack.back()->tail_);
  }
};

Stage::Stage(std::string label, std::int64_t total, std::string unit, bool heartbeat)
    : label_(std::move(label)), unit_(std::move(unit)), total_(std::max<std::int64_t>(0, total)), heartbeat_(heartbeat) {
  Terminal& t = Terminal::get();
  const bool shown = spdlog::should_log(spdlog::level::info);
  live_ = shown && t.tty;
  plain_ = shown && !t.tty;
  start_ = last_beat_ = Clock::now();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    t.stack.push_back(this);
  }
  // Drawn at once: the first unit of work may be the slow one.
  if (live_) redraw(label_, counts_text(false));
}

Stage::~Stage() {
  if (!open_) return;
  open_ = false;
  Terminal& t = Terminal::get();
  std::lock_guard<std::mutex> lock(t.mu);
  const bool top = !t.stack.empty() && t.stack.back() == this;
  t.remove(this);
  if (live_ && top && !t.shown.empty()) {
    write_stderr("\n");  // kept as it was: where the stage stood when it was abandoned
    t.shown.clear();
  }
  t.redraw_top();
}

double Stage::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

bool Stage::due(Clock::time_point now) const { return now - last_draw_ >= kRedrawEvery; }

void Stage::redraw(std::string head, std::string tail) {
  head_ = std::move(head);
  tail_ = std::move(tail);
  last_draw_ = Clock::now();
  Terminal& t = Terminal::get();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.stack.empty() && t.stack.back() == this) t.draw(head_, tail_);
}

void Stage::update(std::int64_t done, std::uint64_t bytes, const std::function<std::string()>& detail) {
  done_ = done;
  bytes_ = bytes;
  if (!live_ && !(plain_ && heartbeat_)) return;
  const auto now = Clock::now();
  if (live_ && due(now)) {
    redraw(label_, counts_text(false) + (detail ? "  " + detail() : std::string()));
  } else if (plain_ && heartbeat_ && now - last_beat_ >= heartbeat_every()) {
    last_beat_ = now;
    print_line(label_ + counts_text(false) + (detail ? "  " + detail() : std::string()));
  }
}

void Stage::advance(std::int64_t units, std::uint64_t bytes) { update(done_ + units, bytes_ + bytes); }

void Stage::show(std::int64_t done, const std::function<std::string()>& line) {
  done_ = done;
  if (live_ && due(Clock::now())) redraw("", line());
}

void Stage::resume_at(std::int64_t done) { done_ = first_done_ = done; }

void Stage::finish(const std::string& summary, bool plain) {
  if (!open_) return;
  open_ = false;
  const std::string text = summary.empty() ? label_ + counts_text(true) : summary;
  Terminal& t = Terminal::get();
  std::lock_guard<std::mutex> lock(t.mu);
  t.remove(this);
  if (live_) {
    // The final line takes the live line's place, and the stage now innermost is drawn below.
    t.clear();
    write_stderr(text + "\n");
    t.redraw_top();
  } else if (plain_ && plain) {
    write_stderr(text + "\n");
  }
}

std::string Stage::counts_text(bool final) const {
  std::string s;
  const bool sizes = unit_ == "bytes";
  auto count = [&](std::int64_t n) { return sizes ? format_bytes(n) : std::to_string(n); };
  if (!unit_.empty()) {
    s += "  " + count(done_);
    if (total_ > 0) s += "/" + count(total_);
    if (!sizes) s += " " + unit_;
    if (total_ > 0) s += " (" + std::to_string(std::min<std::int64_t>(100, done_ * 100 / total_)) + "%)";
  }
  if (bytes_ > 0 && !sizes) s += "  " + format_bytes(static_cast<std::int64_t>(bytes_));
  const double elapsed = seconds();
  if (final) return s + "  in " + format_duration(elapsed);
  const std::uint64_t moved = sizes ? static_cast<std::uint64_t>(std::max<std::int64_t>(0, done_ - first_done_)) : bytes_;
  if (moved > 0 && elapsed > 0.2) s += "  " + format_bytes(static_cast<std::int64_t>(static_cast<double>(moved) / elapsed)) + "/s";
  if (total_ > 0 && done_ > first_done_ && done_ < total_) {
    s += "  eta " + format_duration(elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_ - first_done_));
  }
  return s;
}

void check_progress_settings() { heartbeat_every(); }

void count_tensor_written(std::uint64_t bytes) {
  Stage* stage = nullptr;
  {
    Terminal& t = Terminal::get();
    std::lock_guard<std::mutex> lock(t.mu);
    for (auto it = t.stack.rbegin(); it != t.stack.rend() && !stage; ++it)
      if ((*it)->unit() == "tensors") stage = *it;
  }
  if (stage) stage->advance(1, bytes);
}

void print_above(const std::function<void()>& write) {
  Terminal& t = Terminal::get();
  std::lock_guard<std::mutex> lock(t.mu);
  const std::string live = t.shown;
  t.clear();
  write();
  std::fflush(stderr);
  if (!live.empty()) t.draw("", live);
}

void print_line(const std::string& line) {
  print_above([&] { std::fprintf(stderr, "%s\n", line.c_str()); });
}

std::string format_bytes(std::int64_t signed_bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  const std::int64_t bytes = std::max<std::int64_t>(signed_bytes, 0);
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, kUnits[u]);
  }
  return buf;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  if (s < 59.95) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
    return buf;
  }
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  }
  return buf;
}

}  // namespace ctune
