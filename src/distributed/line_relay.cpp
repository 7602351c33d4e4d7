#include "distributed/line_relay.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace ctune::distributed {

namespace {

// Where to cut `text` (at least `limit` bytes) at most `limit` bytes in: before the last
// UTF-8 character when it does not end by `limit`. Judged from the bytes before the cut, since
// the byte after may not have arrived yet; text that is not UTF-8 is cut at `limit`.
std::size_t piece_end(std::string_view text, std::size_t limit) {
  std::size_t start = limit - 1;  // the first byte of the character the piece would end with
  while (start > limit - 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const unsigned char lead = static_cast<unsigned char>(text[start]);
  const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return start + length > limit ? start : limit;
}

}  // namespace

void write_fully(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) text.remove_prefix(static_cast<std::size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else return;
  }
}

LineRelay::LineRelay(int from, int to, int rank)
    : from_(from), to_(to), prefix_("[rank " + std::to_string(rank) + "] "),
      continued_prefix_("[rank " + std::to_string(rank) + ", continued] ") {
  ::fcntl(from_, F_SETFL, ::fcntl(from_, F_GETFL) | O_NONBLOCK);
}

LineRelay::~LineRelay() {
  if (from_ >= 0) ::close(from_);
}

LineRelay::LineRelay(LineRelay&& other) noexcept
    : from_(std::exchange(other.from_, -1)), to_(other.to_), prefix_(std::move(other.prefix_)),
      continued_prefix_(std::move(other.continued_prefix_)), partial_(std::move(other.partial_)), continues_(other.continues_) {}

void LineRelay::read_some() {
  if (from_ < 0) return;
  char chunk[kRelayPiece];
  const ssize_t n = ::read(from_, chunk, sizeof chunk);
  if (n > 0) take({chunk, static_cast<std::size_t>(n)});
  else if (n == 0 || (errno != EAGAIN && errno != EINTR)) close_after_partial();
}

void LineRelay::finish() {
  if (from_ < 0) return;
  // Only the bytes there now: a descendant still writing must not keep the launcher here.
  int held = 0;
  if (::ioctl(from_, FIONREAD, &held) != 0) held = 0;
  char chunk[kRelayPiece];
  for (std::size_t left = static_cast<std::size_t>(std::max(held, 0)); left > 0;) {
    const ssize_t n = ::read(from_, chunk, std::min(left, sizeof chunk));
    if (n <= 0) break;
    take({chunk, static_cast<std::size_t>(n)});
    left -= static_cast<std::size_t>(n);
  }
  close_after_partial();
}

void LineRelay::take(std::string_view data) {
  // Complete lines: the unfinished one (< kRelayPiece) completed by this chunk, then whole ones.
  for (std::size_t nl; (nl = data.find('\n')) != std::string_view::npos; data.remove_prefix(nl + 1)) {
    partial_.append(data.substr(0, nl + 1));
    write_line(partial_);
    partial_.clear();
    continues_ = false;
  }
  partial_.append(data);
  // A line past the bound goes out in pieces now, each ended by a newline here; the next
  // piece says that it continues it.
  while (partial_.size() >= kRelayPiece) {
    const std::size_t cut = piece_end(partial_, kRelayPiece);
    write_line(std::string_view(partial_).substr(0, cut));
    partial_.erase(0, cut);
    continues_ = true;
  }
}

void LineRelay::write_line(std::string_view text) {
  line_.assign(continues_ ? continued_prefix_ : prefix_);
  line_.append(text);
  if (line_.back() != '\n') line_ += '\n';
  write_fully(to_, line_);
}

void LineRelay::close_after_partial() {
  if (!partial_.empty()) write_line(partial_);
  partial_.clear();
  continues_ = false;
  ::close(from_);
  from_ = -1;
}

}  // namespace ctune::distributed
