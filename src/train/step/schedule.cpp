#include "train/step/schedule.h"

#include <algorithm>
#include <cmath>

namespace ctune::train {

double learning_rate(const ScheduleOptions& o, std::int64_t step) {
  if (step < o.warmup_steps) {
    return o.peak_lr * static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, o.warmup_steps));
  }
  if (o.name == "constant") return o.peak_lr;
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(std::max<std::int64_t>(1, o.total_steps - o.warmup_steps));
  double factor = 0;
  if (o.name == "linear") {
    factor = std::max(0.0, 1.0 - progress);
  } else {  // cosine, half a period
    factor = std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  return o.peak_lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * factor);
}

}  // namespace ctune::train
