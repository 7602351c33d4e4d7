// SimPO (Meng et al. 2024), reference-free, with TRL's semantics (CPOTrainer, loss_type simpo,
// cpo_alpha 0; docs/objectives.md). With avg_c, avg_r the mean log-probability per token of the
// chosen and rejected responses, per pair:
//   z    = avg_c - avg_r - gamma / beta
//   loss = -(1 - eps) log sigmoid(beta z) - eps log sigmoid(-beta z)
// rewards beta avg, logps the per-token means (as TRL reports them). No reference model. Its kind
// (train/objective/kind.h) is in simpo.cpp.
#pragma once

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name simpo's keys, TRL's CPOConfig defaults.
struct SimpoOptions : KindOptions {
  double beta = 0.1;             // objective.beta: the reward scale
  double label_smoothing = 0.0;  // objective.label_smoothing: the share of pairs assumed mislabelled
  double gamma = 0.5;            // objective.gamma: the target reward margin (TRL's simpo_gamma)
};

class SimpoObjective : public Objective {
 public:
  explicit SimpoObjective(const SimpoOptions& options) : options_(options) {}
  std::string name() const override { return "simpo"; }
  double units(const TensorBatch& batch) const override;
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;

 private:
  SimpoOptions options_;
};

}  // namespace ctune::train
