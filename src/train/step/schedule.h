// Learning-rate schedules with linear warmup, as Hugging Face's get_*_schedule_with_warmup:
// the k-th optimizer step (0-based) uses lr * factor(k); warmup starts from 0.
#pragma once

#include <cstdint>
#include <string>

namespace ctune::train {

struct ScheduleOptions {
  std::string name = "cosine";  // constant | linear | cosine
  double peak_lr = 2e-4;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_lr_ratio = 0.0;  // linear/cosine decay towards peak_lr * min_lr_ratio
};

double learning_rate(const ScheduleOptions& options, std::int64_t step);

}  // namespace ctune::train
