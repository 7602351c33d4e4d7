// One reward function of an online objective as the recipe sets it (reward.*; read by grpo.cpp's
// kind, built by make_rewards in rewards.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune::train {

// reward.<name> (docs/objectives.md#rewards).
struct RewardSpec {
  std::string name;             // exact | contains | regex | numeric | format | length | command
  double weight = 1.0;
  std::string field;            // exact, contains, regex, numeric: the record's field compared with
  std::string pattern;          // format: the regex a completion must match whole
  double tolerance = 0.0;       // numeric: |answer - field| <= tolerance scores 1
  std::int64_t max_tokens = 0;  // length: the soft limit (0: objective.max_new_tokens)
  std::int64_t cache = 0;       // length: the tokens before max_tokens where the penalty ramps to -1
  std::vector<std::string> command;  // command: the program and its arguments
  double timeout_s = 10.0;           // command: the longest wait for one answer
  std::string on_error = "fail";     // command: fail (end the step) | zero (score 0, count it)
};

}  // namespace ctune::train
