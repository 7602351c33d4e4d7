// Dynamic loss scaling for fp16 training with torch.amp.GradScaler's semantics and defaults
// (docs/formats.md#loss-scaling): the loss is multiplied by the scale before backward so small fp16
// gradients do not flush to zero; gradients are unscaled (×1/scale, the inverse computed in fp64
// and rounded to fp32) before clipping; a step whose gradients hold an inf or NaN is skipped and
// the scale backs off; after growth_interval clean steps in a row it grows. Disabled (bf16,
// fp32) it is the identity and only reports non-finite gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "train/step/optimizer.h"

namespace ctune::train {

struct GradScalerOptions {
  bool enabled = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

// What a checkpoint keeps of the scaler.
struct GradScalerState {
  double scale = 65536.0;
  std::int64_t growth_tracker = 0;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options);

  bool enabled() const { return options_.enabled; }
  double scale() const { return enabled() ? state_.scale : 1.0; }
  // loss × scale (loss itself when disabled).
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Multiplies every gradient by 1/scale (when enabled) and returns whether any gradient
  // holds an inf or NaN. Call once per step, before clipping.
  bool unscale_and_check(const std::vector<ParamGroup>& groups) const;
  // After the step: back off on inf/NaN, otherwise count towards growth.
  void update(bool found_inf);

  GradScalerState state() const { return state_; }
  void load_state(const GradScalerState& state) { state_ = state; }

 private:
  GradScalerOptions options_;
  GradScalerState state_;
};

}  // namespace ctune::train
