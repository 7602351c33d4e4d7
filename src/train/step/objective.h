// The training objective: what a step minimises, seen by the trainer through one seam
// (docs/objectives.md). Per micro-batch an objective gives a loss summed over its units (target
// tokens for next-token SFT, pairs for preference tuning) and the sums of its metrics over the
// same units; the trainer adds up units over the step's micro-batches and every rank before the
// first backward, so each loss is normalised by the step's total (token- or pair-correct
// accumulation). An objective may add a second part normalised by tokens (ORPO's NLL of the
// chosen sequences, over the step's token units), and say which metrics are per token. The
// objectives beyond SFT, and the one factory, live in train/objective/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/progress.h"
#include "model/decoder.h"
#include "train/step/loss.h"

namespace ctune::train {

// What one micro-batch contributes.
struct ObjectiveTerms {
  at::Tensor loss_sum;              // over the micro-batch's units; backward runs through it
  std::vector<double> metric_sums;  // Objective::metric_names() order, summed over the units
  at::Tensor token_loss_sum = {};   // undefined, or a part summed over the micro-batch's token units
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // The units `batch` adds to the step's normaliser; known before any forward.
  virtual double units(const TensorBatch& batch) const = 0;
  virtual ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) = 0;
  // The token units `batch` adds to the normaliser of ObjectiveTerms::token_loss_sum (0: none).
  virtual double token_units(const TensorBatch& /*batch*/) const { return 0; }
  // Each reported as its sum over the step (or eval split) divided by the units, or by the
  // token units for the names per_token_metrics() lists.
  virtual std::vector<std::string> metric_names() const { return {}; }
  virtual std::vector<std::string> per_token_metrics() const { return {}; }
  // The figures reported from the metrics' sums over a step or an eval split (ranks and
  // micro-batches added): by default each sum over the units, or over the token units for the
  // names per_token_metrics() lists. An objective whose figures are ratios of its own sums
  // overrides it (KTO: a reward over the desirable completions only), and may leave a figure
  // out (a sum that is only a denominator; a mean over no completion).
  virtual std::vector<std::pair<std::string, double>> means(const std::vector<double>& sums, double units, double token_units) const;
  // Whether the loss is a mean token NLL (so a perplexity means something).
  virtual bool token_loss() const { return false; }
};

// Next-token supervised fine-tuning (objective.name: sft): next_token_loss_sum over target
// tokens, exactly what the trainer computed before the seam existed.
class SftObjective : public Objective {
 public:
  explicit SftObjective(bool chunked) : chunked_(chunked) {}
  std::string name() const override { return "sft"; }
  double units(const TensorBatch& batch) const override { return static_cast<double>(batch.target_tokens); }
  ObjectiveTerms forward(model::CausalLM& model, const TensorBatch& batch) override {
    return {next_token_loss_sum(model, batch, chunked_), {}};
  }
  bool token_loss() const override { return true; }

 private:
  bool chunked_;
};

// An objective's figures over eval batches, as sums (ranks add them before dividing).
struct ObjectiveSums {
  double loss = 0, units = 0;
  double token_loss = 0, token_units = 0;  // the token-normalised part, when the objective has one
  std::int64_t target_tokens = 0;
  std::vector<double> metrics;
};
// In eval mode without gradients; the training mode is restored afterwards. `stage`, when
// given, counts the batches and shows the running loss.
ObjectiveSums evaluate_objective(Objective& objective, model::CausalLM& model, const std::vector<TensorBatch>& batches,
                                 Stage* stage = nullptr);
// The mean loss from sums over a step or an eval split: loss / units + token loss / token units.
double mean_loss(const ObjectiveSums& sums);
// Each metric's mean: its sum over the units, or over the token units when it is per token.
std::vector<std::pair<std::string, double>> metric_means(const Objective& objective, const std::vector<double>& sums, double units,
                                                         double token_units);

}  // namespace ctune::train
