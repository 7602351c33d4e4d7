// An external reward function (reward.command: [program, args...]; docs/objectives.md#rewards):
// the program is started once, at the first completion it scores, and kept running; for each
// completion ctune writes one JSON line to its stdin,
//   {"prompt": "...", "completion": "...", "completion_tokens": 7, "fields": {...the record...}}
// and reads exactly one line from its stdout: a number (JSON), the reward. Its stderr is the
// user's. Every request and its answer have `reward.timeout_s` together: a program that
// crashes, exits, stops reading, hangs past the timeout, prints something that is not a number,
// prints a second line for one request or closes its output ends the step with one line naming
// the program, what happened and the sample (Error); with `reward.on_error: zero` the sample
// scores 0, the failure is counted (rewards/command/errors) and the program is started again for
// the next sample. A program that dies of the very signal the run is stopping on (SIGTERM,
// SIGINT) is started again and asked again, once, so the step completes and the stop saves it.
// The process (its group, descriptors, environment, end): train/objective/reward_process.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/objective/reward_function.h"
#include "train/objective/reward_process.h"

namespace ctune::train {

class CommandReward : public RewardFunction {
 public:
  explicit CommandReward(const RewardSpec& spec);
  double score(const RewardSample& sample) override;
  std::optional<std::int64_t> take_errors() override;

 private:
  // The program's answer to `request`, for the sample at `where`; Error when it gives none.
  double answer(const std::string& request, const std::string& where);
  bool restart_for_stop(int status);
  // Ends the program and throws Error naming `what` and `where`.
  [[noreturn]] void fail(const std::string& what, const std::string& where);

  std::string file_;                        // the program file (find_program)
  std::unique_ptr<RewardProcess> process_;  // started at the first completion it scores
  std::string last_where_;                  // the sample last answered: a second line is its
  bool restarted_for_stop_ = false;
  std::int64_t errors_ = 0;
};

// What a run records of its reward program in its checkpoints, to warn on --resume when it
// changed: {path: fingerprint} of the program file (find_program's) and of every argument that
// names a file (the script an interpreter runs: [python3, grader.py]).
Json reward_program_identity(const std::vector<std::string>& command);

// "" when `now` is `then` (reward_program_identity's); else what changed, in words.
std::string reward_program_change(const Json& then, const Json& now);

}  // namespace ctune::train
