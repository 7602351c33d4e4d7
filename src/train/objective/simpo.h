// SimPO (Meng et al. 2024), reference-free, with TRL's semantics (CPOTrainer, loss_type simpo,
// cpo_alpha 0; docs/objectives.md). With avg_c, avg_r the mean log-probability per token of the
// chosen and rejected responses, per pair:
//   z    = avg_c - avg_r - gamma / beta
//   loss = -(1 - eps) log sigmoid(beta z) - eps log sigmoid(-beta z)
// rewards beta avg, logps the per-token means (as TRL reports them). No reference model.
#pragma once

#include "model/decoder.h"
#include "train/objective/options.h"
#include "train/step/objective.h"

namespace ctune::train {

class SimpoObjective : public Objective {
 public:
  explicit SimpoObjective(const ObjectiveOptions& options) : options_(options) {}
  std::string name() const override { return "simpo"; }
  double units(const TensorBatch& batch) const override;
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;

 private:
  ObjectiveOptions options_;
};

}  // namespace ctune::train
