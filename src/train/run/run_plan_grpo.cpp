// The grpo objective's keys (objective.* and reward.*): a part of plan_run (run_plan.h).
#include <algorithm>

#include "core/error.h"
#include "train/objective/rewards.h"
#include "train/run/run_plan.h"

namespace ctune::train {
namespace {

// reward.<name>: {field, weight, ...} with every key known and of its type.
RewardSpec reward_spec(const Recipe& r, const std::string& name) {
  const std::string key = "reward." + name;
  const OrderedJson map = r.get_map(key);
  RewardSpec spec;
  spec.name = name;
  const std::vector<std::string> known = name == "format"   ? std::vector<std::string>{"pattern", "weight"}
                                         : name == "length" ? std::vector<std::string>{"max_tokens", "cache", "weight"}
                                         : name == "numeric" ? std::vector<std::string>{"field", "tolerance", "weight"}
                                                             : std::vector<std::string>{"field", "weight"};
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      r.fail(key, "unknown setting \"" + it.key() + "\" (expected " + list + ")");
    }
    const bool text = it.key() == "field" || it.key() == "pattern";
    if (text ? !it->is_string() : !it->is_number())
      r.fail(key, "\"" + it.key() + "\" expected " + (text ? "a string" : "a number") + ", found " + json_type_name(*it));
  }
  spec.field = map.value("field", std::string());
  spec.pattern = map.value("pattern", std::string());
  spec.weight = map.value("weight", 1.0);
  spec.tolerance = map.value("tolerance", 0.0);
  spec.max_tokens = map.value("max_tokens", std::int64_t{0});
  spec.cache = map.value("cache", std::int64_t{0});
  if (!std::isfinite(spec.weight)) r.fail(key, "\"weight\" must be finite");
  return spec;
}

}  // namespace

void plan_grpo(const Recipe& r, ObjectiveOptions& o) {
  o.beta = r.get_optional_float("objective.beta").value_or(0.0);  // TRL's default: no reference
  o.num_generations = r.get_optional_int("objective.num_generations").value_or(8);
  o.temperature = r.get_optional_float("objective.temperature").value_or(1.0);
  o.top_p = r.get_optional_float("objective.top_p").value_or(1.0);
  o.top_k = r.get_optional_int("objective.top_k").value_or(0);
  o.max_new_tokens = r.get_optional_int("objective.max_new_tokens").value_or(256);
  if (!r.is_null("objective.stop")) o.stop = r.get_strings("objective.stop");
  o.epsilon = r.get_optional_float("objective.epsilon").value_or(0.2);
  o.epsilon_high = r.get_optional_float("objective.epsilon_high").value_or(0.0);
  o.scale_rewards = r.get_optional_string("objective.scale_rewards").value_or("group");
  o.aggregation = r.get_optional_string("objective.aggregation").value_or("token");
  o.num_iterations = r.get_optional_int("objective.num_iterations").value_or(1);
  o.mask_truncated = !r.is_null("objective.mask_truncated") && r.get_bool("objective.mask_truncated");
  o.share_prompt = r.get_optional_string("objective.share_prompt").value_or("auto");
  if (o.num_generations < 2) {
    r.fail("objective.num_generations",
           "expected at least 2, found " + std::to_string(o.num_generations) + ": a group of one has its own reward as the baseline, so every advantage is 0 (objective.scale_rewards " +
               o.scale_rewards + ")");
  }
  if (o.epsilon_high > 0 && o.epsilon_high < o.epsilon)
    r.fail("objective.epsilon_high", "expected at least objective.epsilon (" + std::to_string(o.epsilon) + "), found " + std::to_string(o.epsilon_high));
  for (const auto& name : reward_names())
    if (!r.is_null("reward." + name)) o.rewards.push_back(reward_spec(r, name));
  if (!r.is_null("reward.command")) {
    RewardSpec spec;
    spec.name = "command";
    spec.command = r.get_strings("reward.command");
    spec.weight = r.get_optional_float("reward.command_weight").value_or(1.0);
    spec.timeout_s = r.get_optional_float("reward.timeout_s").value_or(10.0);
    spec.on_error = r.get_optional_string("reward.on_error").value_or("fail");
    o.rewards.push_back(std::move(spec));
  }
  for (const char* key : {"reward.command_weight", "reward.timeout_s", "reward.on_error"})
    if (!r.is_null(key) && r.is_null("reward.command")) r.fail(key, "applies to reward.command, which this recipe does not set");
  if (o.rewards.empty())
    r.fail("reward.exact", "grpo needs at least one reward function (reward.exact, contains, regex, numeric, format, length or command)");
  make_rewards(o.rewards, o.max_new_tokens);  // settings checked now, before any file is read
}

}  // namespace ctune::train
