// One rank's stdout or stderr as the `--nproc` launcher relays it (distributed/launcher.h):
// every line the rank prints reaches the launcher's own stream with "[rank R] " in front.
//
// Memory stays bounded whatever a rank prints (docs/distributed.md, "The launcher"): a line
// without a newline is held only up to kRelayPiece, then written as a piece and continued on a
// line prefixed "[rank R, continued] ". Holding a whole line made a 1 GB line cost the launcher
// 1.8 GB, and the rank (or the reward program writing it) waited on a full pipe meanwhile.
//
// The read end is non-blocking, so relaying never waits for a rank: a rank's descendants (a
// reward program's background child) may hold its write end open long after the rank has
// exited, and end of file may never come. finish() relays what the pipe holds when the rank
// is gone and closes it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ctune::distributed {

// The most of one line held before it is written as a piece.
inline constexpr std::size_t kRelayPiece = 64 * 1024;

// Writes all of `text` to `fd`, retrying short writes; gives up silently when `fd` refuses
// (a closed terminal must not stop the run).
void write_fully(int fd, std::string_view text);

class LineRelay {
 public:
  // Relays the read end `from` (owned; made non-blocking here) to `to`, as rank `rank`'s.
  LineRelay(int from, int to, int rank);
  ~LineRelay();
  LineRelay(LineRelay&& other) noexcept;
  LineRelay& operator=(LineRelay&&) = delete;
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  // The read end to poll; -1 once closed.
  int fd() const { return from_; }
  // One read of what the pipe holds (never waits); writes out what is complete. At end of
  // file writes the unfinished line and closes.
  void read_some();
  // The rank has exited: relays what the pipe holds now (not what its descendants may write
  // later), then the unfinished line, and closes.
  void finish();

 private:
  void take(std::string_view data);
  void write_line(std::string_view text);
  void close_after_partial();

  int from_, to_;
  std::string prefix_, continued_prefix_;
  std::string partial_;    // the unfinished line, < kRelayPiece bytes between calls
  bool continues_ = false;  // partial_ continues a line already written in part
  std::string line_;       // reused for the line written out
};

}  // namespace ctune::distributed
