// A reward program as a process (train/objective/reward_command.h speaks its protocol;
// docs/objectives.md#rewards). It is started in a process group of its own, so that a signal
// to ctune's group (Ctrl-C in a terminal, Slurm's scancel, a container's stop) does not end it
// in the middle of a step the run is finishing; with stdin and stdout as pipes, stderr the
// user's, no other descriptor of ctune's (train.log, a rank's sockets) and none of the run's
// rendezvous variables (distributed::kRendezvousVariables). One exchange writes a request and
// reads one line back within one deadline, whatever the program does (stops reading, hangs,
// floods): ctune's own pipe end never blocks. Ending it kills its whole group, so nothing it
// started outlives the run; it dies with ctune (PR_SET_PDEATHSIG), and a second stop signal's
// _exit kills its group too (core/stop_signal.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ctune::train {

// The file `name` runs as, found as execvp finds it (`name` itself when it holds a '/', else
// the first directory on PATH holding it) and required to be a regular, executable file; ""
// when there is none.
std::string find_program(const std::string& name);

class RewardProcess {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // What one exchange came to: the answer line (without its newline), or what went wrong.
  struct Reply {
    std::optional<std::string> line;
    std::string problem;
    bool closed = false;  // the program closed a pipe: it is exiting, or has exited
  };

  // Starts `file` (find_program's) with `argv` (argv[0] as the user wrote it). Error naming
  // `name` when it cannot.
  RewardProcess(const std::string& file, const std::vector<std::string>& argv, const std::string& name);
  ~RewardProcess();  // kills its process group and reaps the program
  RewardProcess(const RewardProcess&) = delete;
  RewardProcess& operator=(const RewardProcess&) = delete;

  // Writes `request` (one line) and reads one line back, both within one deadline `timeout_s`
  // away (reward.timeout_s).
  Reply exchange(const std::string& request, double timeout_s);
  // What the program printed beyond its last answer line, by now ("" when nothing).
  std::string stray_output();
  // How the program ended (a waitpid status), waiting up to `grace` for it to exit; nullopt
  // while it runs.
  std::optional<int> exit_status(std::chrono::milliseconds grace);

 private:
  void read_some();  // appends what is readable now to pending_; notes end of output in closed_

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  int to_ = -1, from_ = -1;  // the program's stdin (we write, non-blocking) and stdout (we read)
  std::string pending_;      // bytes read past the last answer line
  bool closed_ = false;      // its stdout reached end of file
};

}  // namespace ctune::train
