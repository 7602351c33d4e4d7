#include "train/objective/reward_command.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/log.h"

namespace ctune::train {
namespace {

std::string program_text(const std::vector<std::string>& command) {
  std::string out;
  for (const auto& a : command) out += (out.empty() ? "" : " ") + a;
  return out;
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status));
  return "stopped";
}

// Whether `program` names an executable file: itself when it holds a '/', else on PATH (as
// execvp looks).
bool executable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const auto end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = end > at ? dirs.substr(at, end - at) : ".";
    if (::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

CommandReward::CommandReward(const RewardSpec& spec) : RewardFunction(spec) {
  if (spec_.command.empty()) throw ConfigError("reward.command: empty (expected [program, args...])");
  if (!executable(spec_.command[0]))
    throw ConfigError("reward.command: " + spec_.command[0] + " is not an executable program (a path, or a name on PATH)");
  if (!(spec_.timeout_s > 0)) throw ConfigError("reward.timeout_s: expected > 0, found " + std::to_string(spec_.timeout_s));
}

CommandReward::~CommandReward() { stop(); }

void CommandReward::start() {
  // A write to a program that has exited must be an error to report, not SIGPIPE ending ctune.
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw Error("reward.command " + program_text(spec_.command) + ": cannot create pipes (" + std::strerror(errno) + ")");
  std::vector<char*> argv;
  for (const auto& a : spec_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: dies with ctune; stdin and stdout are the pipes, stderr the user's.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::execvp(argv[0], argv.data());
    const std::string line = "reward.command: cannot start " + std::string(argv[0]) + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw Error("reward.command " + program_text(spec_.command) + ": cannot start (" + std::strerror(errno) + ")");
  }
  pid_ = pid;
  to_ = in[1];
  from_ = out[0];
  pending_.clear();
}

void CommandReward::stop() {
  if (to_ >= 0) ::close(to_);
  if (from_ >= 0) ::close(from_);
  to_ = from_ = -1;
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

void CommandReward::fail(const std::string& what, const std::string& where, bool exiting) {
  // What the program's exit says, when it has exited. One that closed a pipe is usually
  // exiting: give it a moment to be reaped.
  std::string why = what;
  int status = 0;
  for (int i = 0; pid_ > 0 && i < (exiting ? 50 : 1); ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      why += " (it " + status_text(status) + ")";
      pid_ = -1;
      break;
    }
    ::usleep(10000);
  }
  stop();
  throw Error("reward.command " + program_text(spec_.command) + ": " + why + ", scoring a completion of " + where);
}

std::string CommandReward::read_line(const std::string& where) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(spec_.timeout_s);
  for (;;) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) fail(fmt::format("no answer within reward.timeout_s {:g} s", spec_.timeout_s), where);
    pollfd p{from_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends it
    char chunk[4096];
    const ssize_t n = ::read(from_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("stopped before answering: closed its output", where, /*exiting=*/true);
    pending_.append(chunk, static_cast<std::size_t>(n));
    if (pending_.size() > (1u << 20)) fail("printed a line longer than 1 MiB", where);
  }
}

double CommandReward::score(const RewardSample& s) {
  const bool zero_on_error = spec_.on_error == "zero";
  try {
    if (pid_ <= 0) start();
    Json request = {{"prompt", s.prompt}, {"completion", s.completion}, {"completion_tokens", s.completion_tokens}};
    request["fields"] = Json::parse(s.fields.dump());
    const std::string line = request.dump() + "\n";
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(to_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(std::string("stopped before answering: stopped reading its input, ") + std::strerror(errno), s.where,
             /*exiting=*/true);
      done += static_cast<std::size_t>(n);
    }
    const std::string answer = read_line(s.where);
    double value = 0;
    try {
      const Json j = Json::parse(answer);
      if (!j.is_number()) throw std::invalid_argument("not a number");
      value = j.get<double>();
    } catch (const std::exception&) {
      fail("printed \"" + answer.substr(0, 80) + "\", expected a number", s.where);
    }
    if (!std::isfinite(value)) fail("printed " + answer + ", expected a finite number", s.where);
    return value;
  } catch (const Error& e) {
    if (!zero_on_error) throw;
    spdlog::warn("{}; scored 0 (reward.on_error: zero)", e.what());
    ++errors_;
    stop();  // started again for the next sample
    return 0.0;
  }
}

std::optional<std::int64_t> CommandReward::take_errors() {
  const auto n = errors_;
  errors_ = 0;
  return n;
}

}  // namespace ctune::train
