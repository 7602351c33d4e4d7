// The launcher's relay of a rank's output (distributed/line_relay.h): lines whole with their
// prefix, a line past the bound in pieces that put together give it back (never cutting a UTF-8
// character), and finish() returning while another writer still holds the pipe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

#include "distributed/line_relay.h"

namespace {
using ctune::distributed::kRelayPiece;
using ctune::distributed::LineRelay;
using ctune::distributed::write_fully;

// A file to relay into, read back whole.
struct Sink {
  std::FILE* file = std::tmpfile();
  ~Sink() { std::fclose(file); }
  int fd() const { return ::fileno(file); }
  std::string text() const {
    std::string out(static_cast<std::size_t>(::lseek(fd(), 0, SEEK_END)), '\0');
    ::pread(fd(), out.data(), out.size(), 0);
    return out;
  }
};

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    read = fds[0];
    write = fds[1];
  }
};

// Rank `rank`'s relay from a fresh pipe into a file.
struct Relayed {
  explicit Relayed(int rank) : relay(pipe.read, sink.fd(), rank) {}
  Sink sink;
  Pipe pipe;
  LineRelay relay;
};

TEST(LineRelay, LinesPassWholeWithTheirPrefix) {
  Relayed r(2);
  write_fully(r.pipe.write, "first\nsec");
  r.relay.read_some();
  write_fully(r.pipe.write, "ond\nunfinished");
  r.relay.read_some();
  EXPECT_EQ(r.sink.text(), "[rank 2] first\n[rank 2] second\n");
  ::close(r.pipe.write);
  r.relay.read_some();  // end of file: the unfinished line goes out too
  EXPECT_EQ(r.sink.text(), "[rank 2] first\n[rank 2] second\n[rank 2] unfinished\n");
  EXPECT_EQ(r.relay.fd(), -1);
}

TEST(LineRelay, ALongLineGoesOutInBoundedPiecesThatPutTogetherGiveItBack) {
  // 100,000 three-byte characters (300,000 bytes, not a multiple of the bound's 65,536):
  // the pieces must not cut one.
  std::string line;
  for (int i = 0; i < 100000; ++i) line += "\xE2\x82\xAC";  // U+20AC
  Relayed r(0);
  std::thread writer([&] {
    write_fully(r.pipe.write, line + "\nafter\n");
    ::close(r.pipe.write);
  });
  while (r.relay.fd() >= 0) r.relay.read_some();
  writer.join();
  std::istringstream out(r.sink.text());
  std::string whole, text;
  int pieces = 0;
  for (std::string l; std::getline(out, l); ++pieces) {
    const std::string prefix = pieces == 0 ? "[rank 0] " : "[rank 0, continued] ";
    if (l == "[rank 0] after") break;
    ASSERT_EQ(l.rfind(prefix, 0), 0u) << "piece " << pieces;
    const std::string body = l.substr(prefix.size());
    EXPECT_LE(body.size(), kRelayPiece);
    EXPECT_EQ(body.size() % 3, 0u) << "piece " << pieces << " cuts a character";
    whole += body;
  }
  EXPECT_EQ(whole, line);
  EXPECT_EQ(pieces, 5);  // 300,000 bytes in pieces of at most 65,536
  EXPECT_NE(r.sink.text().find("\n[rank 0] after\n"), std::string::npos) << "the next line starts afresh";
}

TEST(LineRelay, FinishReturnsThoughAnotherWriterStillHoldsThePipe) {
  Relayed r(1);
  write_fully(r.pipe.write, "last words");
  // The write end stays open: a rank's descendant that outlives it. finish() must not wait.
  r.relay.finish();
  EXPECT_EQ(r.relay.fd(), -1);
  EXPECT_EQ(r.sink.text(), "[rank 1] last words\n");
  ::close(r.pipe.write);
}

}  // namespace
