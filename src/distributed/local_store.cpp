#include "distributed/local_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/random_hex.h"

namespace ctune::distributed {

// The wire format, one frame each way per request: u32 length, then the body. A request body
// is an op byte and its fields; strings are u32 length + bytes, integers little-endian i64 (one
// machine: host order). A reply body is a status byte and its payload.
namespace {

enum Op : std::uint8_t { kHello = 1, kSet, kGet, kAdd, kCheck, kDelete, kNumKeys, kCompareSet };
enum Status : std::uint8_t { kOk = 0, kNo = 1, kRefused = 2 };

constexpr std::size_t kMaxFrame = 2 * kMaxStoreValue + 64 * kMaxStoreKey;
constexpr std::size_t kMaxStoreBytes = std::size_t(64) << 20;  // all keys and values together
constexpr int kMaxReports = 10;

void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_i64(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

// Reads fields from a body; any read past its end or past a bound marks it bad.
struct Reader {
  const std::string& body;
  std::size_t pos = 0;
  bool bad = false;
  bool take(void* to, std::size_t n) {
    if (bad || body.size() - pos < n) return !(bad = true);
    std::memcpy(to, body.data() + pos, n);
    pos += n;
    return true;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    take(&v, 4);
    return v;
  }
  std::int64_t i64() {
    std::int64_t v = 0;
    take(&v, 8);
    return v;
  }
  std::string str(std::size_t bound) {
    const std::uint32_t n = u32();
    if (bad || n > bound || body.size() - pos < n) {
      bad = true;
      return {};
    }
    std::string s = body.substr(pos, n);
    pos += n;
    return s;
  }
  bool done() const { return !bad && pos == body.size(); }
};

bool equal_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Writes all of `data` within `timeout`; false when the peer stops reading or is gone.
bool send_all(int fd, const std::string& data, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
  return true;
}

}  // namespace

// ---- the server ----------------------------------------------------------------------------

struct StoreServer::Impl {
  std::string dir, path, secret;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::atomic<int> refused{0};

  struct Client {
    int fd = -1;
    bool authenticated = false;
    pid_t pid = 0;
    uid_t uid = 0;
    std::string in;
  };
  std::vector<Client> clients;
  std::map<std::string, std::string> data;
  std::size_t bytes = 0;

  void report(const Client& c, const std::string& why) {
    const int n = ++refused;
    if (n > kMaxReports) return;
    std::string line = "ctune: the run's store refused a connection from pid " + std::to_string(c.pid) + " (uid " +
                       std::to_string(c.uid) + "): " + why + "; the run is unaffected\n";
    if (n == kMaxReports) line += "ctune: (further refused connections are counted, not listed)\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
  }

  void store(const std::string& key, std::string value) {
    auto it = data.find(key);
    if (it != data.end()) bytes -= it->second.size(), it->second = std::move(value), bytes += it->second.size();
    else bytes += key.size() + value.size(), data.emplace(key, std::move(value));
  }

  // One request of an authenticated client; the reply, or empty to drop the client.
  std::string handle(Client& c, const std::string& body) {
    Reader r{body};
    std::uint8_t op = 0;
    r.take(&op, 1);
    std::string reply;
    auto status = [&](Status s) { reply.assign(1, static_cast<char>(s)); };
    if (!c.authenticated) {
      const std::string shown = op == kHello ? r.str(256) : std::string();
      if (op != kHello || !r.done() || !equal_secret(shown, secret)) {
        report(c, op == kHello ? "wrong secret" : "no secret shown");
        return {};
      }
      c.authenticated = true;
      status(kOk);
      return reply;
    }
    switch (op) {
      case kSet: {
        std::string key = r.str(kMaxStoreKey), value = r.str(kMaxStoreValue);
        if (!r.done()) break;
        if (bytes + key.size() + value.size() > kMaxStoreBytes) return status(kRefused), reply;
        store(key, std::move(value));
        return status(kOk), reply;
      }
      case kGet: {
        const std::string key = r.str(kMaxStoreKey);
        if (!r.done()) break;
        const auto it = data.find(key);
        if (it == data.end()) return status(kNo), reply;
        status(kOk);
        put_str(reply, it->second);
        return reply;
      }
      case kAdd: {
        const std::string key = r.str(kMaxStoreKey);
        const std::int64_t delta = r.i64();
        if (!r.done()) break;
        std::int64_t value = 0;
        if (const auto it = data.find(key); it != data.end()) {
          char* end = nullptr;
          errno = 0;
          value = std::strtoll(it->second.c_str(), &end, 10);
          if (it->second.empty() || *end != '\0' || errno != 0) return status(kRefused), reply;  // not a counter
        }
        if ((delta > 0 && value > INT64_MAX - delta) || (delta < 0 && value < INT64_MIN - delta)) return status(kRefused), reply;
        value += delta;
        if (bytes + key.size() + 24 > kMaxStoreBytes) return status(kRefused), reply;
        store(key, std::to_string(value));
        status(kOk);
        put_i64(reply, value);
        return reply;
      }
      case kCheck: {
        const std::uint32_t n = r.u32();
        if (n > 64) break;
        bool all = true;
        for (std::uint32_t i = 0; i < n; ++i) all = data.count(r.str(kMaxStoreKey)) > 0 && all;
        if (!r.done()) break;
        return status(all ? kOk : kNo), reply;
      }
      case kDelete: {
        const std::string key = r.str(kMaxStoreKey);
        if (!r.done()) break;
        const auto it = data.find(key);
        if (it == data.end()) return status(kNo), reply;
        bytes -= it->first.size() + it->second.size();
        data.erase(it);
        return status(kOk), reply;
      }
      case kNumKeys:
        if (!r.done()) break;
        status(kOk);
        put_i64(reply, static_cast<std::int64_t>(data.size()));
        return reply;
      case kCompareSet: {
        const std::string key = r.str(kMaxStoreKey), expected = r.str(kMaxStoreValue), desired = r.str(kMaxStoreValue);
        if (!r.done()) break;
        const auto it = data.find(key);
        const bool swap = it == data.end() ? expected.empty() : it->second == expected;
        if (swap && bytes + key.size() + desired.size() > kMaxStoreBytes) return status(kRefused), reply;
        if (swap) store(key, desired);
        status(kOk);
        put_str(reply, data.count(key) ? data[key] : expected);
        return reply;
      }
      default:
        break;
    }
    report(c, "a malformed request (op " + std::to_string(op) + ", " + std::to_string(body.size()) + " bytes)");
    return {};
  }

  void accept_one() {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    Client c;
    c.fd = fd;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) c.pid = cred.pid, c.uid = cred.uid;
    if (c.uid != ::geteuid()) {
      report(c, "another user");
      ::close(fd);
      return;
    }
    clients.push_back(std::move(c));
  }

  // Reads what a client sent and answers every whole request; false to drop it.
  bool serve(Client& c) {
    char chunk[65536];
    const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.in.append(chunk, static_cast<std::size_t>(n));
    const std::size_t bound = c.authenticated ? kMaxFrame : 512;
    while (c.in.size() >= 4) {
      std::uint32_t len = 0;
      std::memcpy(&len, c.in.data(), 4);
      if (len > bound) {
        report(c, "a request of " + std::to_string(len) + " bytes (at most " + std::to_string(bound) + ")");
        return false;
      }
      if (c.in.size() < 4 + std::size_t(len)) break;
      const std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + std::size_t(len));
      const std::string reply = handle(c, body);
      if (reply.empty()) return false;
      std::string frame;
      put_u32(frame, static_cast<std::uint32_t>(reply.size()));
      frame += reply;
      if (!send_all(c.fd, frame, std::chrono::seconds(5))) return false;
    }
    return true;
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) accept_one();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Client& c = clients[i - 2];
        if (!serve(c)) {
          ::close(c.fd);
          c.fd = -1;
        }
      }
      clients.erase(std::remove_if(clients.begin(), clients.end(), [](const Client& c) { return c.fd < 0; }), clients.end());
    }
  }
};

StoreServer::StoreServer() : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  // A socket path must fit sockaddr_un (108 bytes): a long TMPDIR falls back to /tmp.
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' && std::strlen(tmp) < 64 ? tmp : "/tmp";
  std::string templ = base + "/ctune-store.XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) throw IoError("--nproc: cannot create the store's directory under " + base + " (" + std::strerror(errno) + ")");
  s.dir = templ;  // mkdtemp: mode 0700, a fresh name, never an existing entry
  s.path = s.dir + "/store";
  s.secret = random_hex(32);
  s.listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, s.path.c_str(), s.path.size() + 1);
  if (s.listen_fd < 0 || ::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s.listen_fd, 128) != 0 ||
      ::pipe2(s.wake, O_CLOEXEC) != 0) {
    const int err = errno;
    if (s.listen_fd >= 0) ::close(s.listen_fd);
    ::unlink(s.path.c_str());
    ::rmdir(s.dir.c_str());
    throw IoError("--nproc: cannot serve the store at " + s.path + " (" + std::strerror(err) + ")");
  }
  ::chmod(s.path.c_str(), 0600);
  s.thread = std::thread([&s] { s.loop(); });
}

StoreServer::~StoreServer() {
  Impl& s = *impl_;
  (void)!::write(s.wake[1], "x", 1);
  if (s.thread.joinable()) s.thread.join();
  for (const auto& c : s.clients) ::close(c.fd);
  ::close(s.listen_fd);
  ::close(s.wake[0]);
  ::close(s.wake[1]);
  ::unlink(s.path.c_str());
  ::rmdir(s.dir.c_str());
}

const std::string& StoreServer::socket_path() const { return impl_->path; }
const std::string& StoreServer::secret() const { return impl_->secret; }
int StoreServer::refused() const { return impl_->refused.load(); }

// ---- a rank's client -----------------------------------------------------------------------

namespace {

class LocalStore : public c10d::Store {
 public:
  LocalStore(std::string path, std::string secret, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), path_(std::move(path)), secret_(std::move(secret)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path_.size() >= sizeof addr.sun_path) throw std::runtime_error("store socket path too long: " + path_);
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const int err = errno;
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("cannot reach the launcher's store at " + path_ + " (" + std::strerror(err) + ")");
    }
    std::string body(1, static_cast<char>(kHello));
    put_str(body, secret_);
    if (request(body)[0] != kOk) throw std::runtime_error("the launcher's store refused this rank's secret");
  }
  ~LocalStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    std::string body(1, static_cast<char>(kSet));
    put_str(body, key);
    put_str(body, std::string(value.begin(), value.end()));
    expect_ok(request(body), "set", key);
  }

  std::vector<std::uint8_t> compareSet(const std::string& key, const std::vector<std::uint8_t>& current,
                                       const std::vector<std::uint8_t>& desired) override {
    std::string body(1, static_cast<char>(kCompareSet));
    put_str(body, key);
    put_str(body, std::string(current.begin(), current.end()));
    put_str(body, std::string(desired.begin(), desired.end()));
    const std::string reply = request(body);
    expect_ok(reply, "compareSet", key);
    return payload(reply, key);
  }

  std::vector<std::uint8_t> get(const std::string& key) override {
    wait({key}, timeout_);
    std::string body(1, static_cast<char>(kGet));
    put_str(body, key);
    const std::string reply = request(body);
    expect_ok(reply, "get", key);
    return payload(reply, key);
  }

  std::int64_t add(const std::string& key, std::int64_t value) override {
    std::string body(1, static_cast<char>(kAdd));
    put_str(body, key);
    put_i64(body, value);
    const std::string reply = request(body);
    expect_ok(reply, "add", key);
    Reader r{reply, 1};
    const std::int64_t v = r.i64();
    if (!r.done()) throw std::runtime_error("the launcher's store: a malformed answer to add " + key);
    return v;
  }

  bool deleteKey(const std::string& key) override {
    std::string body(1, static_cast<char>(kDelete));
    put_str(body, key);
    return request(body)[0] == kOk;
  }

  bool check(const std::vector<std::string>& keys) override {
    std::string body(1, static_cast<char>(kCheck));
    put_u32(body, static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) put_str(body, k);
    return request(body)[0] == kOk;
  }

  std::int64_t getNumKeys() override {
    const std::string reply = request(std::string(1, static_cast<char>(kNumKeys)));
    Reader r{reply, 1};
    return r.i64();
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  // Polls: the server never holds a request open, so one slow key blocks no other rank.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto pause = std::chrono::milliseconds(1); !check(keys); pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
      if (timeout != kNoTimeout && std::chrono::steady_clock::now() >= deadline) {
        throw std::runtime_error("the launcher's store: wait for " + (keys.empty() ? std::string() : keys[0]) + " timed out after " +
                                 std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(pause);
    }
  }

  // LibTorch >= 2.5 declares Store::clone(); declared without `override` it fits 1.13 too.
  c10::intrusive_ptr<c10d::Store> clone() { return c10::make_intrusive<LocalStore>(path_, secret_, timeout_); }

 private:
  static void expect_ok(const std::string& reply, const char* what, const std::string& key) {
    if (reply[0] != kOk) throw std::runtime_error(std::string("the launcher's store refused ") + what + " " + key + " (too large, or not a counter)");
  }
  static std::vector<std::uint8_t> payload(const std::string& reply, const std::string& key) {
    Reader r{reply, 1};
    const std::string v = r.str(kMaxStoreValue);
    if (!r.done()) throw std::runtime_error("the launcher's store: a malformed answer for " + key);
    return {v.begin(), v.end()};
  }

  // One frame out, one frame back, within the timeout.
  std::string request(const std::string& body) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string frame;
    put_u32(frame, static_cast<std::uint32_t>(body.size()));
    frame += body;
    const auto limit = std::max(timeout_, std::chrono::milliseconds(1000));
    if (!send_all(fd_, frame, limit)) throw std::runtime_error("the launcher's store is gone (" + path_ + ")");
    std::string in;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::uint32_t len = 0;
    for (std::size_t want = 4; in.size() < want;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)
        throw std::runtime_error("the launcher's store did not answer within " + std::to_string(limit.count()) + " ms");
      char chunk[65536];
      const ssize_t n = ::recv(fd_, chunk, std::min(sizeof chunk, want - in.size()), 0);
      if (n == 0 || (n < 0 && errno != EINTR)) throw std::runtime_error("the launcher's store is gone (" + path_ + ")");
      if (n > 0) in.append(chunk, static_cast<std::size_t>(n));
      if (want == 4 && in.size() == 4) {
        std::memcpy(&len, in.data(), 4);
        if (len == 0 || len > kMaxFrame) throw std::runtime_error("the launcher's store sent a malformed answer");
        want = 4 + len;
      }
    }
    return in.substr(4);
  }

  std::string path_, secret_;
  int fd_ = -1;
  std::mutex mutex_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_local_store(const std::string& socket_path, const std::string& secret,
                                                    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<LocalStore>(socket_path, secret, timeout);
}

}  // namespace ctune::distributed
