#include "train/objective/reward_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "distributed/world.h"

extern char** environ;

namespace ctune::train {
namespace {

constexpr std::size_t kMaxLine = 1u << 20;

bool runnable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// ctune's environment less the run's rendezvous variables: a grader that runs model-written
// code must not hand it the store's secret.
std::vector<std::string> program_environment() {
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (std::none_of(std::begin(distributed::kRendezvousVariables), std::end(distributed::kRendezvousVariables),
                     [&](const char* v) { return name == v; }))
      out.push_back(text);
  }
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A pipe whose four ends lie above stderr, so that the child's dup2 onto 0 and 1 cannot
// overwrite one it still needs (ctune may have been started with stdin or stdout closed).
void make_pipe(int ends[2], const std::string& name) {
  if (::pipe2(ends, O_CLOEXEC) != 0) throw Error(name + ": cannot create a pipe (" + std::strerror(errno) + ")");
  for (int i = 0; i < 2; ++i) {
    if (ends[i] > STDERR_FILENO) continue;
    const int moved = ::fcntl(ends[i], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    ::close(ends[i]);
    ends[i] = moved;
  }
}

// Every descriptor above stderr closed (train.log, a rank's sockets and epoll): close_range
// where the kernel has it (5.9), else one by one up to the limit.
void close_other_descriptors() {
  if (::close_range(STDERR_FILENO + 1, ~0U, 0) == 0) return;
  rlimit limit{};
  const rlim_t n = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? limit.rlim_cur : 65536;
  for (rlim_t fd = STDERR_FILENO + 1; fd < n; ++fd) ::close(static_cast<int>(fd));
}

// The child between fork and exec: async-signal-safe calls only (the parent has threads).
[[noreturn]] void become_program(const char* file, char* const* argv, char* const* envp, int in, int out, pid_t parent,
                                 const std::string& cannot) {
  ::setpgid(0, 0);  // a group of its own: ctune's group's signals pass it by, its own can end all of it
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // ctune died before the line above took effect
  ::signal(SIGPIPE, SIG_DFL);               // ctune ignores it; exec keeps ignored signals ignored
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(in, STDIN_FILENO);
  ::dup2(out, STDOUT_FILENO);
  close_other_descriptors();
  ::execvpe(file, argv, envp);  // `file` holds a '/': no PATH search, but a script without #! still runs with sh
  const char* why = std::strerror(errno);
  (void)!::write(STDERR_FILENO, cannot.data(), cannot.size());
  (void)!::write(STDERR_FILENO, why, std::strlen(why));
  (void)!::write(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

long long ms_until(RewardProcess::Deadline deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
}

}  // namespace

std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const auto end = std::min(dirs.find(':', at), dirs.size());
    const std::string file = (end > at ? dirs.substr(at, end - at) : ".") + "/" + name;
    if (runnable(file)) return file;
    at = end + 1;
  }
  return "";
}

RewardProcess::RewardProcess(const std::string& file, const std::vector<std::string>& argv, const std::string& name) {
  // A write to a program that has exited must be an error to report, not SIGPIPE ending ctune.
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  make_pipe(in, name);
  try {
    make_pipe(out, name);
  } catch (const Error&) {
    ::close(in[0]);
    ::close(in[1]);
    throw;
  }
  std::vector<std::string> args = argv, env = program_environment();
  const std::vector<char*> arg_ptrs = c_strings(args), env_ptrs = c_strings(env);
  const std::string cannot = "reward.command: cannot start " + file + ": ";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) become_program(file.c_str(), arg_ptrs.data(), env_ptrs.data(), in[0], out[1], parent, cannot);
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw Error(name + ": cannot start (" + std::strerror(errno) + ")");
  }
  ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before it is signalled
  end_with_process(pid);
  pid_ = pid;
  to_ = in[1];
  from_ = out[0];
  ::fcntl(to_, F_SETFL, O_NONBLOCK);  // a program that stops reading must not block ctune in write()
  ::fcntl(from_, F_SETFL, O_NONBLOCK);
}

RewardProcess::~RewardProcess() {
  ::close(to_);
  ::close(from_);
  ::kill(-pid_, SIGKILL);  // the group: what the program started ends with it
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
  }
  forget_process_group(pid_);
}

void RewardProcess::read_some() {
  char chunk[65536];
  while (pending_.size() <= kMaxLine) {
    const ssize_t n = ::read(from_, chunk, sizeof chunk);
    if (n > 0) {
      pending_.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0) {
      closed_ = true;
      return;
    } else if (errno != EINTR) {
      return;  // EAGAIN: nothing more for now
    }
  }
}

RewardProcess::Reply RewardProcess::exchange(const std::string& request, double timeout_s) {
  const Deadline deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  std::size_t sent = 0;
  for (;;) {
    const bool written = sent == request.size();
    if (const auto nl = pending_.find('\n'); written && nl != std::string::npos) {
      Reply r;
      r.line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return r;
    }
    if (closed_) return {std::nullopt, "stopped before answering: closed its output", true};
    if (pending_.size() > kMaxLine) return {std::nullopt, "printed a line longer than 1 MiB", false};
    const long long left = ms_until(deadline);
    if (left <= 0 && !written) {
      return {std::nullopt, fmt::format("did not read its whole request ({} bytes, {} taken) within reward.timeout_s {:g} s", request.size(),
                                        sent, timeout_s),
              false};
    }
    if (left <= 0) return {std::nullopt, fmt::format("no answer within reward.timeout_s {:g} s", timeout_s), false};
    pollfd p[2] = {{from_, POLLIN, 0}, {to_, POLLOUT, 0}};
    const int ready = ::poll(p, written ? 1 : 2, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (ready < 0 && errno != EINTR) return {std::nullopt, std::string("cannot wait for it (") + std::strerror(errno) + ")", false};
    if (ready <= 0) continue;  // interrupted, or the deadline: checked above
    if (!written && p[1].revents != 0) {
      const ssize_t n = ::write(to_, request.data() + sent, request.size() - sent);
      if (n > 0) sent += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        return {std::nullopt, std::string("stopped before answering: stopped reading its input, ") + std::strerror(errno), true};
    }
    if (p[0].revents != 0) read_some();
  }
}

std::string RewardProcess::stray_output() {
  if (!closed_) read_some();
  return pending_;
}

std::optional<int> RewardProcess::exit_status(std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  while (!reaped_) {
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
    } else if (std::chrono::steady_clock::now() >= until) {
      return std::nullopt;
    } else {
      ::usleep(10000);
    }
  }
  return status_;
}

}  // namespace ctune::train
