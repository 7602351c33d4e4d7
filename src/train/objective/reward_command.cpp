#include "train/objective/reward_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "io/manifest.h"

namespace ctune::train {
namespace {

namespace fs = std::filesystem;

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

std::string request_line(const RewardSample& s) {
  Json request = {{"prompt", s.prompt}, {"completion", s.completion}, {"completion_tokens", s.completion_tokens}};
  request["fields"] = Json::parse(s.fields.dump());
  return request.dump() + "\n";
}

std::string first_line(const std::string& text) { return text.substr(0, std::min<std::size_t>(text.find('\n'), 80)); }

}  // namespace

CommandReward::CommandReward(const RewardSpec& spec) : RewardFunction(spec) {
  if (spec_.command.empty()) throw ConfigError("reward.command: empty (expected [program, args...])");
  file_ = find_program(spec_.command[0]);
  if (file_.empty())
    throw ConfigError("reward.command: " + spec_.command[0] + " is not an executable program (a regular file: a path, or a name on PATH)");
  if (!(spec_.timeout_s > 0)) throw ConfigError("reward.timeout_s: expected > 0, found " + std::to_string(spec_.timeout_s));
}

double CommandReward::score(const RewardSample& s) {
  try {
    return answer(request_line(s), s.where);
  } catch (const Error& e) {
    if (spec_.on_error != "zero") throw;
    spdlog::warn("{}; scored 0 (reward.on_error: zero)", e.what());
    ++errors_;
    process_.reset();  // started again for the next sample
    return 0.0;
  }
}

double CommandReward::answer(const std::string& request, const std::string& where) {
  for (;;) {
    if (!process_) process_ = std::make_unique<RewardProcess>(file_, spec_.command, "reward.command " + program_text(spec_.command));
    // One number per request: a line that came after the last answer would be taken for this one's.
    if (const std::string more = process_->stray_output(); !more.empty())
      fail("printed a second line for one request (\"" + first_line(more) + "\")", last_where_);
    const RewardProcess::Reply reply = process_->exchange(request, spec_.timeout_s);
    if (!reply.line) {
      // One that closed a pipe is usually exiting: give it a moment to be reaped.
      const std::optional<int> status = process_->exit_status(std::chrono::milliseconds(reply.closed ? 500 : 0));
      if (status && restart_for_stop(*status)) continue;
      fail(reply.problem + (status ? " (it " + status_text(*status) + ")" : ""), where);
    }
    last_where_ = where;
    double value = 0;
    try {
      const Json j = Json::parse(*reply.line);
      if (!j.is_number()) throw std::invalid_argument("not a number");
      value = j.get<double>();
    } catch (const std::exception&) {
      fail("printed \"" + reply.line->substr(0, 80) + "\", expected a number", where);
    }
    if (!std::isfinite(value)) fail("printed " + *reply.line + ", expected a finite number", where);
    if (const std::string more = process_->stray_output(); !more.empty())
      fail("printed a second line for one request (\"" + first_line(more) + "\")", where);
    return value;
  }
}

// A program that died of the signal the run is stopping on (its own process group shields it
// from the run's group's signals, but Slurm's scancel signals every process of the job; exit
// status 128 + signal, as a shell reports it, counts too) is started again and asked again,
// once: the step completes, every rank with it, and the stop checkpoints it as promised. The
// run's own signal may arrive a moment after the program's: up to a second is given for it.
bool CommandReward::restart_for_stop(int status) {
  const int signal = WIFSIGNALED(status) ? WTERMSIG(status) : WIFEXITED(status) ? WEXITSTATUS(status) - 128 : 0;
  if (restarted_for_stop_ || (signal != SIGTERM && signal != SIGINT)) return false;
  for (int i = 0; i < 100 && stop_requested() == 0; ++i) ::usleep(10000);
  if (stop_requested() != signal) return false;
  restarted_for_stop_ = true;
  spdlog::warn("reward.command {} ended with {}, the signal this run is stopping on: started again to finish the step",
               program_text(spec_.command), signal_name(signal));
  process_.reset();
  return true;
}

void CommandReward::fail(const std::string& what, const std::string& where) {
  process_.reset();
  throw Error("reward.command " + program_text(spec_.command) + ": " + what + ", scoring a completion of " + where);
}

std::optional<std::int64_t> CommandReward::take_errors() { return std::exchange(errors_, 0); }

Json reward_program_identity(const std::vector<std::string>& command) {
  Json files = Json::object();
  auto add = [&](const std::string& file) {
    std::string fingerprint = "unreadable";  // a program one may run (mode --x) but not read
    try {
      fingerprint = io::input_fingerprint(file);
    } catch (const IoError&) {
    }
    files[fs::absolute(file).lexically_normal().string()] = fingerprint;
  };
  if (const std::string file = command.empty() ? "" : find_program(command[0]); !file.empty()) add(file);
  std::error_code ec;
  for (std::size_t i = 1; i < command.size(); ++i)
    if (fs::is_regular_file(command[i], ec)) add(command[i]);
  return files;
}

std::string reward_program_change(const Json& then, const Json& now) {
  std::string out;
  auto note = [&](const std::string& text) { out += (out.empty() ? "" : "; ") + text; };
  for (auto it = then.begin(); it != then.end(); ++it) {
    if (!now.contains(it.key())) {
      note(it.key() + " is no longer part of it");
    } else if (now[it.key()] != it.value()) {
      note(it.key() + " holds other content (fingerprint " + it.value().get<std::string>() + ", now " + now[it.key()].get<std::string>() + ")");
    }
  }
  for (auto it = now.begin(); it != now.end(); ++it)
    if (!then.contains(it.key())) note(it.key() + " is new");
  return out;
}

}  // namespace ctune::train
