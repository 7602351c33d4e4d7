#include "infer/score.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ctune::infer {

ScoreResult score_tokens(model::CausalLM& model, const std::vector<std::int64_t>& ids, const std::string& where) {
  const auto& config = model->config();
  if (ids.empty()) throw ConfigError(where + ": no tokens to score (expected at least 1)");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config.vocab_size) {
      throw ConfigError(where + ": token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary (expected 0.." + std::to_string(config.vocab_size - 1) + ")");
    }
  }

  at::NoGradGuard no_grad;
  const auto T = static_cast<std::int64_t>(ids.size());
  auto input = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).view({1, T});
  auto logits = model->forward(input).squeeze(0).to(at::kFloat);  // [T, V]
  auto logp = at::log_softmax(logits, -1);
  ScoreResult r;
  auto argmax = logits.argmax(-1).contiguous();
  r.argmax.assign(argmax.data_ptr<std::int64_t>(), argmax.data_ptr<std::int64_t>() + T);
  if (T > 1) {
    auto targets = input.squeeze(0).narrow(0, 1, T - 1).unsqueeze(1);
    auto nll = -logp.narrow(0, 0, T - 1).gather(1, targets).squeeze(1).to(at::kDouble).contiguous();
    r.nll.assign(nll.data_ptr<double>(), nll.data_ptr<double>() + (T - 1));
  }
  return r;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]) || !std::isfinite(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace ctune::infer
