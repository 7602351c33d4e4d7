// Scoring: per-position negative log-likelihood of the next token and the greedy next token,
// computed in fp32 from the model's logits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/decoder.h"

namespace ctune::infer {

struct ScoreResult {
  std::vector<double> nll;           // T-1 values: -log p(ids[t+1] | ids[..t])
  std::vector<std::int64_t> argmax;  // T values: greedy next token after each position
};

// ids must be non-empty and inside the vocabulary (throws ConfigError naming `where`).
ScoreResult score_tokens(model::CausalLM& model, const std::vector<std::int64_t>& ids, const std::string& where);

// The largest |a[i] - b[i]|, +infinity when the lengths differ or any value is not finite:
// every self-check's measure, so that a model scoring NaN never passes one.
double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace ctune::infer
