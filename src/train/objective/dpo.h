// Direct preference optimisation (Rafailov et al. 2023) with TRL's DPOTrainer semantics
// (docs/objectives.md). A batch holds pairs as consecutive rows, chosen then rejected, the
// prompt masked. With pi and ref the summed log-probabilities of a response under the policy
// and the reference, per pair:
//   delta   = (pi_c - ref_c) - (pi_r - ref_r)
//   sigmoid = -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta)   (eps: label_smoothing, cDPO)
//   hinge   = max(0, 1 - beta delta)                                            (SLiC)
//   ipo     = (delta_avg - 1 / (2 beta))^2, delta_avg with each log-ratio divided by its response's tokens
// and the rewards beta (pi - ref) of each response. The loss is a sum over pairs (the unit).
// Its kind (train/objective/kind.h) is in dpo.cpp: it reads preference pairs and compares the
// policy with a reference, live or precomputed.
#pragma once

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/objective/reference_table.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name dpo's keys, TRL's DPOConfig defaults.
struct DpoOptions : KindOptions {
  std::string loss_type = "sigmoid";  // objective.loss_type: sigmoid | ipo | hinge
  double beta = 0.1;                  // objective.beta: the pull towards the reference (IPO's tau)
  double label_smoothing = 0.0;       // objective.label_smoothing (sigmoid): the share of pairs assumed mislabelled
  bool precompute_reference = false;  // objective.precompute_reference: the reference's log-probabilities computed once
};

class DpoObjective : public Objective {
 public:
  // `reference` null: the policy with its adapters off (LoRA). `table`: precomputed reference
  // log-probabilities, looked up instead of a reference forward.
  DpoObjective(const DpoOptions& options, model::CausalLM reference, std::shared_ptr<const ReferenceTable> table = nullptr);
  std::string name() const override { return "dpo"; }
  double units(const TensorBatch& batch) const override;
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;

 private:
  DpoOptions options_;
  model::CausalLM reference_;
  std::shared_ptr<const ReferenceTable> table_;
};

}  // namespace ctune::train
