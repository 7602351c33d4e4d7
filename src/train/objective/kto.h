// KTO, Kahneman-Tversky optimisation (Ethayarajh et al. 2024), with TRL's KTOTrainer semantics
// (docs/objectives.md#kto). It learns from unpaired completions, each labelled desirable or not
// (data.format: unpaired_preference). A batch holds each record as two consecutive rows: its
// prompt + completion, then its KL row (its prompt + another record's completion,
// data/kl_rows.h). With pi and ref the summed log-probabilities of a completion under the policy
// and the reference, r = pi - ref per record, and z the reference point
//   z = max(0, mean over the batch's KL rows of (pi - ref))      no gradient flows through it
//   desirable:   desirable_weight   (1 - sigmoid(beta (r - z)))
//   undesirable: undesirable_weight (1 - sigmoid(beta (z - r)))
// summed over the records (the unit). z is the micro-batch's, on each rank its own rows (TRL
// averages the devices' z; here N ranks compute what one process computes with grad_accum N).
// Its kind (train/objective/kind.h) is in kto.cpp: it compares the policy with a reference,
// live or precomputed, as DPO does.
#pragma once

#include "model/decoder.h"
#include "train/objective/kind.h"
#include "train/objective/reference_table.h"
#include "train/step/objective.h"

namespace ctune::train {

// objective.name kto's keys, TRL 1.9's KTOConfig defaults.
struct KtoOptions : KindOptions {
  double beta = 0.1;                  // objective.beta: the pull towards the reference
  double desirable_weight = 1.0;      // objective.desirable_weight: a desirable completion's loss weight
  double undesirable_weight = 1.0;    // objective.undesirable_weight: an undesirable completion's
  bool precompute_reference = false;  // objective.precompute_reference: the reference's log-probabilities computed once
};

class KtoObjective : public Objective {
 public:
  // `reference` null: the policy with its adapters off (LoRA). `table`: precomputed reference
  // log-probabilities (of the KL rows too), looked up instead of a reference forward.
  KtoObjective(const KtoOptions& options, model::CausalLM reference, std::shared_ptr<const ReferenceTable> table = nullptr);
  std::string name() const override { return "kto"; }
  double units(const TensorBatch& batch) const override;
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override;
  std::vector<std::string> metric_names() const override;
  // TRL's figures: rewards and logps over the desirable (chosen) or undesirable (rejected)
  // completions of the step, their margin, and the mean reference point `kl`; a figure over no
  // completion is left out, as TRL leaves it out.
  std::vector<std::pair<std::string, double>> means(const std::vector<double>& sums, double units, double token_units) const override;

 private:
  KtoOptions options_;
  model::CausalLM reference_;
  std::shared_ptr<const ReferenceTable> table_;
};

}  // namespace ctune::train
