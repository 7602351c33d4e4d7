#include "train/objective/kind.h"

#include <sstream>

namespace ctune::train {

std::optional<Generation> ObjectiveOptions::generation() const {
  if (!kind->generation) return std::nullopt;
  return kind->generation(*own);
}

double positive_beta(const Recipe& r, const std::string& objective, double fallback) {
  const double beta = r.get_optional_float("objective.beta").value_or(fallback);
  if (beta <= 0) r.fail("objective.beta", "expected > 0 for objective.name " + objective + ", found " + std::to_string(beta));
  return beta;
}

std::string summary_number(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

}  // namespace ctune::train
