#include "distributed/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/line_relay.h"
#include "distributed/local_store.h"

namespace ctune::distributed {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }

void catch_signals() {
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // Ctrl-Z: ranks stopped mid-collective would time each other out when continued, so the run
  // is saved and stopped as for SIGTERM instead (docs/distributed.md).
  ::sigaction(SIGTSTP, &sa, nullptr);
}

// This process's own command line, to start each rank with.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t pos = 0; pos < all.size();) {
    const auto end = all.find('\0', pos);
    args.push_back(all.substr(pos, end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return args;
}

// Rank `rank`'s environment: this process's, with the torchrun variables and the store's.
std::vector<std::string> rank_environment(int rank, int nproc, const StoreServer& store) {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(rank)},        {"WORLD_SIZE", std::to_string(nproc)},
      {"LOCAL_RANK", std::to_string(rank)},  {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"MASTER_ADDR", "127.0.0.1"},          {"CTUNE_STORE_SOCKET", store.socket_path()},
      {"CTUNE_STORE_SECRET", store.secret()}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : vars) replaced |= entry.substr(0, entry.find('=')) == name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : vars) env.push_back(std::string(name) + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// `from` as `to` in a child about to exec: dup2 leaves close-on-exec set when they are the
// same descriptor (a launcher started with stdout closed gets a pipe at fd 1).
void install_fd(int from, int to) {
  if (from == to) ::fcntl(to, F_SETFD, 0);
  else ::dup2(from, to);
}

struct Rank {
  pid_t pid;
  LineRelay out, err;
  bool running = true;
};

// Starts rank `rank`, its stdout and stderr pipes whose read ends the launcher relays. Every
// descriptor the launcher opens is close-on-exec, so a rank (and what it starts) inherits only
// its own stdin, stdout and stderr. Everything the child needs is built before fork: the
// launcher has threads (the store's), and the child only calls what is safe after fork.
Rank start_rank(int rank, int nproc, const StoreServer& store, std::vector<std::string> args) {
  std::vector<std::string> env = rank_environment(rank, nproc, store);
  const std::vector<char*> argv = pointers(args), envp = pointers(env);
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    throw IoError("--nproc: cannot create the pipes of rank " + std::to_string(rank) + ": " + std::strerror(e));
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: its own process group (a terminal's Ctrl-C reaches it once, through the
    // launcher), killed if the launcher dies (also if it died before prctl), output into the
    // launcher's pipes.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(127);
    install_fd(out[1], STDOUT_FILENO);
    install_fd(err[1], STDERR_FILENO);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    static const char kCannot[] = "ctune: cannot start rank: ";
    write_fully(STDERR_FILENO, kCannot);
    write_fully(STDERR_FILENO, std::strerror(errno));
    write_fully(STDERR_FILENO, "\n");
    ::_exit(127);
  }
  const int e = errno;
  ::close(out[1]);
  ::close(err[1]);
  Rank r{pid, LineRelay(out[0], STDOUT_FILENO, rank), LineRelay(err[0], STDERR_FILENO, rank)};
  if (pid < 0) throw IoError("--nproc: cannot start rank " + std::to_string(rank) + ": " + std::strerror(e));
  return r;
}

int exit_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

std::string how_it_ended(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  const int sig = WTERMSIG(wait_status);
  return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
}

// The ranks of one launch. Whatever ends the launch (an exception included), none outlives it.
class Ranks {
 public:
  Ranks(int nproc, const StoreServer& store) {
    const auto args = own_command_line();
    ranks_.reserve(static_cast<std::size_t>(nproc));
    try {
      for (int r = 0; r < nproc; ++r) ranks_.push_back(start_rank(r, nproc, store, args));
    } catch (...) {
      end_all();  // a rank that cannot start fails the launch; those started must not wait for it
      throw;
    }
  }
  ~Ranks() { end_all(); }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int live() const {
    int n = 0;
    for (const auto& rk : ranks_) n += rk.running;
    return n;
  }
  void signal(int sig) const {
    for (const auto& rk : ranks_)
      if (rk.running) ::kill(rk.pid, sig);
  }

  // Relays what the ranks print, waiting at most `timeout` for some.
  void relay(std::chrono::milliseconds timeout) {
    std::vector<pollfd> fds;
    std::vector<LineRelay*> relays;
    for (auto& rk : ranks_) {
      for (LineRelay* relay : {&rk.out, &rk.err}) {
        if (relay->fd() < 0) continue;
        fds.push_back({relay->fd(), POLLIN, 0});
        relays.push_back(relay);
      }
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents != 0) relays[i]->read_some();
  }

  // Reaps the ranks that have exited, calling on_exit(rank, wait status) for each. A reaped
  // rank's output stops here: what its pipes hold is relayed and they are closed, though a
  // descendant may still hold them open (docs/distributed.md, "The launcher").
  template <typename OnExit>
  void reap(OnExit on_exit) {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rk = ranks_[r];
      int ws = 0;
      if (!rk.running || ::waitpid(rk.pid, &ws, WNOHANG) != rk.pid) continue;
      rk.running = false;
      rk.out.finish();
      rk.err.finish();
      on_exit(static_cast<int>(r), ws);
    }
  }

 private:
  void end_all() {
    for (auto& rk : ranks_) {
      if (!rk.running) continue;
      ::kill(rk.pid, SIGKILL);
      ::waitpid(rk.pid, nullptr, 0);
      rk.running = false;
    }
  }

  std::vector<Rank> ranks_;
};

// Forwards a signal the launcher received to the ranks.
void forward_signal(const Ranks& ranks) {
  int sig = g_signal.exchange(0);
  if (sig == 0) return;
  if (sig == SIGTSTP) {
    write_fully(STDERR_FILENO, "ctune: Ctrl-Z (SIGTSTP): a run of several processes cannot be suspended; the ranks save a "
                               "checkpoint and stop (continue with --resume)\n");
    sig = SIGTERM;
  }
  ranks.signal(sig);
}

}  // namespace

int launch_local(int nproc, std::chrono::milliseconds grace) {
  // The store every rank meets at, hosted here for the launcher's lifetime: a Unix socket in a
  // private directory, reachable by this user with the run's secret only (dist/local_store.h).
  const StoreServer store;
  catch_signals();
  Ranks ranks(nproc, store);

  int first_failure = 0;
  Clock::time_point kill_at = Clock::time_point::max();
  auto on_exit = [&](int rank, int wait_status) {
    const int status = exit_status(wait_status);
    if (status == 0 || first_failure != 0) return;
    first_failure = status;
    const int live = ranks.live();
    if (live > 0) kill_at = Clock::now() + grace;
    // Stopped by SIGTERM or SIGINT: saved and stopped as asked, nothing to report.
    if (status == 128 + SIGTERM || status == 128 + SIGINT) return;
    write_fully(STDERR_FILENO, "ctune: rank " + std::to_string(rank) + " " + how_it_ended(wait_status) +
                                   (live > 0 ? "; stopping the other ranks\n" : "\n"));
  };
  while (ranks.live() > 0) {
    forward_signal(ranks);
    ranks.relay(std::chrono::milliseconds(200));
    ranks.reap(on_exit);
    if (Clock::now() >= kill_at) {
      ranks.signal(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  return first_failure;
}

}  // namespace ctune::distributed
