// What a reward function is (train/objective/rewards.h lists them): it scores one completion
// of one prompt, given the prompt's record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/json.h"
#include "train/objective/reward_spec.h"

namespace ctune::train {

// One completion as the reward functions see it.
struct RewardSample {
  const std::string& prompt;      // the prompt as rendered (the generation prompt included)
  const std::string& completion;  // decoded, cut before a stop string
  std::int64_t completion_tokens = 0;
  const OrderedJson& fields;      // the prompt's record
  const std::string& where;       // "data.train record 17", for messages
};

class RewardFunction {
 public:
  explicit RewardFunction(const RewardSpec& spec) : spec_(spec) {}
  virtual ~RewardFunction() = default;
  const std::string& name() const { return spec_.name; }
  double weight() const { return spec_.weight; }
  // The record field it reads ("" when none).
  const std::string& field() const { return spec_.field; }
  // Error (one line naming the function and the sample) when it cannot score.
  virtual double score(const RewardSample& sample) = 0;
  // The samples scored 0 because scoring failed since the last call, for a function that may
  // fail and go on (reward.command with reward.on_error: zero); nullopt for the others.
  virtual std::optional<std::int64_t> take_errors() { return std::nullopt; }

 protected:
  RewardSpec spec_;
};

}  // namespace ctune::train
