// The reward functions of online RL (objective.name: grpo; docs/objectives.md#rewards): each
// scores one completion of one prompt; the objective sums them with their weights. Built in:
//   exact     1 when the completion, whitespace trimmed, equals the record's field (trimmed)
//   contains  1 when the completion contains the record's field
//   regex     1 when the record's field, a regular expression (Python syntax), matches somewhere in it
//   numeric   1 when the completion's last number is within `tolerance` of the field's number
//   format    1 when the recipe's pattern (Python syntax) matches the whole completion
//   length    DAPO's overlong penalty: 0 up to max_tokens - cache tokens, then falling linearly
//             to -1 at max_tokens, and -1 beyond
//   command   an external program's answer (train/objective/reward_command.h)
// Each gives 0 otherwise. A record without a field a function needs is refused before training
// (check_fields); a field's regular expression that does not compile ends the step with one line
// naming the function and the sample. A search is bounded (tokenizer/regex.h): one past the bound
// scores 0, warned once per record and counted in rewards/NAME/errors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/objective/reward_spec.h"
#include "train/objective/reward_function.h"

namespace ctune::train {

// The functions of `specs`, in their order; ConfigError for an unknown name or a bad setting
// (a pattern that does not compile, a cache longer than max_tokens). `max_new_tokens`: what
// length's max_tokens defaults to.
std::vector<std::unique_ptr<RewardFunction>> make_rewards(const std::vector<RewardSpec>& specs, std::int64_t max_new_tokens);

// ConfigError naming the first record (`split` record index) that lacks a field a function reads,
// or holds one that is not a string or a number.
void check_fields(const std::vector<std::unique_ptr<RewardFunction>>& rewards, const std::vector<OrderedJson>& records,
                  const std::string& split);

// The names a recipe can give (reward.<name>).
const std::vector<std::string>& reward_names();

}  // namespace ctune::train
