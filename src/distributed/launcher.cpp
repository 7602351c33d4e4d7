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
#include "distributed/local_store.h"

namespace ctune::distributed {

namespace {

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }

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

struct Rank {
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends of its stdout and stderr
  std::string out_buf, err_buf;
  bool running = true;
  int status = 0;  // exit status, 128 + signal when killed
};

void write_all(int fd, const std::string& text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) done += static_cast<std::size_t>(n);
  }
}

// Copies complete lines from `fd` to `to`, each prefixed; false at end of file.
bool pump(int fd, std::string& buf, int to, const std::string& prefix, bool flush) {
  char chunk[65536];
  errno = 0;
  const ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n > 0) buf.append(chunk, static_cast<std::size_t>(n));
  std::size_t pos = 0;
  for (std::size_t nl; (nl = buf.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    write_all(to, prefix + buf.substr(pos, nl - pos + 1));
  }
  buf.erase(0, pos);
  if ((n == 0 || flush) && !buf.empty()) {
    write_all(to, prefix + buf + "\n");
    buf.clear();
  }
  return n > 0 || (n < 0 && errno == EINTR);
}

pid_t start_rank(int rank, int nproc, const StoreServer& store, const std::vector<std::string>& args, int out_w, int err_w) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child: its own process group (a terminal's Ctrl-C reaches it once, through the
  // launcher), killed if the launcher dies, output into the launcher's pipes.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::dup2(out_w, STDOUT_FILENO);
  ::dup2(err_w, STDERR_FILENO);
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(rank)},        {"WORLD_SIZE", std::to_string(nproc)},
      {"LOCAL_RANK", std::to_string(rank)},  {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"MASTER_ADDR", "127.0.0.1"},          {"CTUNE_STORE_SOCKET", store.socket_path()},
      {"CTUNE_STORE_SECRET", store.secret()}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}};
  for (const auto& [name, value] : vars) ::setenv(name, value.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  const std::string line = std::string("ctune: cannot start rank: ") + std::strerror(errno) + "\n";
  write_all(STDERR_FILENO, line);
  ::_exit(127);
}

int exit_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

}  // namespace

int launch_local(int nproc, std::chrono::milliseconds grace) {
  // The store every rank meets at, hosted here for the launcher's lifetime: a Unix socket in a
  // private directory, reachable by this user with the run's secret only (dist/local_store.h).
  const StoreServer store;

  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // Ctrl-Z: ranks stopped mid-collective would time each other out when continued, so the run
  // is saved and stopped as for SIGTERM instead (docs/distributed.md).
  ::sigaction(SIGTSTP, &sa, nullptr);

  const auto args = own_command_line();
  std::vector<Rank> ranks(static_cast<std::size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw IoError(std::string("--nproc: pipe: ") + std::strerror(errno));
    ranks[r].pid = start_rank(r, nproc, store, args, out[1], err[1]);
    ::close(out[1]);
    ::close(err[1]);
    ranks[r].out = out[0];
    ranks[r].err = err[0];
  }

  int first_failure = 0;
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  for (int live = nproc; live > 0;) {
    if (int sig = g_signal.exchange(0); sig != 0) {
      if (sig == SIGTSTP) {
        write_all(STDERR_FILENO, "ctune: Ctrl-Z (SIGTSTP): a run of several processes cannot be suspended; the ranks save a "
                                 "checkpoint and stop (continue with --resume)\n");
        sig = SIGTERM;
      }
      for (const auto& rk : ranks)
        if (rk.running) ::kill(rk.pid, sig);
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // rank, is stderr
    for (int r = 0; r < nproc; ++r) {
      if (ranks[r].out >= 0) fds.push_back({ranks[r].out, POLLIN, 0}), who.emplace_back(r, false);
      if (ranks[r].err >= 0) fds.push_back({ranks[r].err, POLLIN, 0}), who.emplace_back(r, true);
    }
    ::poll(fds.data(), fds.size(), 200);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Rank& rk = ranks[who[i].first];
      int& fd = who[i].second ? rk.err : rk.out;
      const std::string prefix = "[rank " + std::to_string(who[i].first) + "] ";
      if (!pump(fd, who[i].second ? rk.err_buf : rk.out_buf, who[i].second ? STDERR_FILENO : STDOUT_FILENO, prefix, false)) {
        ::close(fd);
        fd = -1;
      }
    }
    for (int r = 0; r < nproc; ++r) {
      Rank& rk = ranks[r];
      int ws = 0;
      if (!rk.running || ::waitpid(rk.pid, &ws, WNOHANG) != rk.pid) continue;
      rk.running = false;
      rk.status = exit_status(ws);
      --live;
      if (rk.status != 0 && first_failure == 0) {
        first_failure = rk.status;
        const bool stopped = rk.status == 128 + SIGTERM || rk.status == 128 + SIGINT;  // saved and stopped
        if (live > 0 && !stopped) {
          write_all(STDERR_FILENO, "ctune: rank " + std::to_string(r) + " exited with status " + std::to_string(rk.status) +
                                       "; stopping the other ranks\n");
        }
        if (live > 0) kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
    if (std::chrono::steady_clock::now() >= kill_at) {
      for (const auto& rk : ranks)
        if (rk.running) ::kill(rk.pid, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  // What the ranks printed last, after they exited.
  for (int r = 0; r < nproc; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    while (ranks[r].out >= 0 && pump(ranks[r].out, ranks[r].out_buf, STDOUT_FILENO, prefix, true)) {}
    while (ranks[r].err >= 0 && pump(ranks[r].err, ranks[r].err_buf, STDERR_FILENO, prefix, true)) {}
  }
  return first_failure;
}

}  // namespace ctune::distributed
