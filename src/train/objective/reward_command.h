// An external reward function (reward.command: [program, args...]; docs/objectives.md#rewards):
// the program is started once, at the first completion it scores, and kept running; for each
// completion ctune writes one JSON line to its stdin,
//   {"prompt": "...", "completion": "...", "completion_tokens": 7, "fields": {...the record...}}
// and reads one line from its stdout: a number (JSON), the reward. Its stderr is the user's.
// Every answer has `reward.timeout_s`: a program that crashes, exits, hangs past the timeout,
// prints something that is not a number, or closes its output ends the step with one line naming
// the program, what happened and the sample (Error); with `reward.on_error: zero` the sample
// scores 0, the failure is counted (rewards/command/errors) and the program is started again for
// the next sample. The program dies with ctune (PR_SET_PDEATHSIG) and is killed when the run ends.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "train/objective/reward_function.h"

namespace ctune::train {

class CommandReward : public RewardFunction {
 public:
  explicit CommandReward(const RewardSpec& spec);
  ~CommandReward() override;
  CommandReward(const CommandReward&) = delete;
  CommandReward& operator=(const CommandReward&) = delete;
  double score(const RewardSample& sample) override;
  std::optional<std::int64_t> take_errors() override;

 private:
  void start();
  void stop();
  // The next line of the program's stdout within the timeout; throws Error naming `where`.
  std::string read_line(const std::string& where);
  // Ends the program and throws Error naming `what` and `where`, with the program's exit status
  // when it has exited (`exiting`: it closed a pipe, so wait a moment for that).
  [[noreturn]] void fail(const std::string& what, const std::string& where, bool exiting = false);

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;  // the program's stdin (we write) and stdout (we read)
  std::string pending_;      // bytes read past the last line
  std::int64_t errors_ = 0;
};

}  // namespace ctune::train
