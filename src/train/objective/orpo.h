// ORPO (Hong et al. 2024), reference-free, with TRL's semantics (ORPOTrainer; docs/objectives.md):
// the chosen sequences' next-token NLL plus beta (the paper's lambda) times the odds-ratio term.
// With avg_c, avg_r the mean log-probability per response token,
//   log_odds = (avg_c - avg_r) - (log(1 - exp(avg_c)) - log(1 - exp(avg_r)))
//   loss     = NLL(chosen) - beta mean_pairs log sigmoid(log_odds)
// The NLL is over the chosen rows' whole sequences, prompt included ("orpo chosen nll loss is
// computed over the full prompt and response", says TRL), divided by those tokens: a token
// loss over the step's token units, so accumulation and ranks give one process's step. Its kind
// (train/objective/kind.h) is in orpo.cpp.
#pragma once

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name orpo's keys, TRL's ORPOConfig defaults.
struct OrpoOptions : KindOptions {
  double beta = 0.1;  // objective.beta: the odds-ratio term's weight (the paper's lambda)
};

class OrpoObjective : public Objective {
 public:
  explicit OrpoObjective(const OrpoOptions& options) : options_(options) {}
  std::string name() const override { return "orpo"; }
  double units(const TensorBatch& batch) const override;
  double token_units(const TensorBatch& batch) const override;
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::string> per_token_metrics() const override { return {"nll_loss"}; }

 private:
  OrpoOptions options_;
};

}  // namespace ctune::train
