// The recipe's objective.* keys as one struct (read by plan_run, given to make_objective).
#pragma once

#include <string>

namespace ctune::train {

// objective.* of the recipe.
struct ObjectiveOptions {
  std::string name = "sft";           // sft | dpo | simpo | orpo
  std::string loss_type = "sigmoid";  // dpo: sigmoid | ipo | hinge
  double beta = 0.1;                  // dpo: the pull towards the reference (IPO's tau); simpo: the reward scale; orpo: lambda
  double label_smoothing = 0.0;       // dpo sigmoid, simpo: the share of pairs assumed mislabelled
  double gamma = 0.5;                 // simpo: the target reward margin (TRL's simpo_gamma)
  bool precompute_reference = false;  // dpo: the reference's log-probabilities computed once, before training
};

}  // namespace ctune::train
