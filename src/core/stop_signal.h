// SIGTERM and SIGINT as requests to stop, for long runs: schedulers preempt jobs with SIGTERM
// (then SIGKILL after a grace period) and Ctrl-C sends SIGINT. After install_stop_handlers(), the
// first such signal only sets a flag that the training loop reads between steps: it finishes the
// step, writes a checkpoint and ends the run with StoppedError (exit status 128 + signal, as the
// shell reports a killed process: 143 for SIGTERM, 130 for SIGINT). A second signal ends the
// process at once with that status; an atomic checkpoint being written is then simply absent,
// and the process groups registered with end_with_process (reward programs) are killed first.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/error.h"

namespace ctune {

// The run stopped on request after saving its work; status() is the process's exit status.
class StoppedError : public Error {
 public:
  StoppedError(int signal, const std::string& what) : Error(what), signal_(signal) {}
  const char* kind() const noexcept override { return "stopped"; }
  int status() const noexcept { return 128 + signal_; }

 private:
  int signal_;
};

// Installs the handlers for SIGTERM and SIGINT (idempotent).
void install_stop_handlers();

// The signal that asked the process to stop (SIGTERM or SIGINT), or 0.
int stop_requested();

// A process group this process started (a reward program's: train/objective/reward_process.h)
// that the second signal's _exit, which runs no destructor, must not leave behind; at most 16
// at a time (more are not registered). forget_process_group once the group is ended.
void end_with_process(pid_t group);
void forget_process_group(pid_t group);

// "SIGTERM", "SIGINT", or "signal N".
std::string signal_name(int signal);

}  // namespace ctune
