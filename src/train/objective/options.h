// The recipe's objective.* keys as one struct (read by plan_run, given to make_objective).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune::train {

// One reward function of an online objective (reward.<name>: docs/objectives.md#rewards).
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

// objective.* of the recipe.
struct ObjectiveOptions {
  std::string name = "sft";           // sft | dpo | simpo | orpo | grpo
  std::string loss_type = "sigmoid";  // dpo: sigmoid | ipo | hinge
  double beta = 0.1;                  // dpo: the pull towards the reference (IPO's tau); simpo: the reward scale; orpo: lambda
  double label_smoothing = 0.0;       // dpo sigmoid, simpo: the share of pairs assumed mislabelled
  double gamma = 0.5;                 // simpo: the target reward margin (TRL's simpo_gamma)
  bool precompute_reference = false;  // dpo: the reference's log-probabilities computed once, before training

  // grpo (docs/objectives.md#grpo), TRL's GRPOConfig names and defaults where it has them.
  std::int64_t num_generations = 8;     // completions sampled per prompt (a group)
  double temperature = 1.0;             // sampling, and the log-probabilities' logit scale
  double top_p = 1.0;
  std::int64_t top_k = 0;               // 0: off
  std::int64_t max_new_tokens = 256;    // TRL's max_completion_length
  std::vector<std::string> stop;        // text stop strings
  double epsilon = 0.2;                 // the ratio's clip below 1 (and above, unless epsilon_high)
  double epsilon_high = 0.0;            // 0: epsilon (DAPO's clip-higher when larger)
  std::string scale_rewards = "group";  // group | batch | none
  std::string aggregation = "token";    // sequence (GRPO) | token (DAPO, TRL's default) | fixed (Dr. GRPO)
  std::int64_t num_iterations = 1;      // optimisation passes over one generation batch
  bool mask_truncated = false;          // completions cut by max_new_tokens train nothing (DAPO)
  std::string share_prompt = "auto";    // a group trained as one row after one prompt copy: auto | always | never
  std::vector<RewardSpec> rewards;      // summed with their weights
};

}  // namespace ctune::train
