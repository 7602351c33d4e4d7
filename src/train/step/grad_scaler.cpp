#include "train/step/grad_scaler.h"

#include <ATen/record_function.h>

#include <cmath>

#include "core/error.h"
#include "ops/fused_optimizer.h"
#include "ops/profile_regions.h"

namespace ctune::train {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  if (!(options_.growth_factor > 1.0)) throw ConfigError("loss_scaling.growth_factor must be > 1, found " + std::to_string(options_.growth_factor));
  if (!(options_.backoff_factor < 1.0 && options_.backoff_factor > 0.0)) {
    throw ConfigError("loss_scaling.backoff_factor must be in (0, 1), found " + std::to_string(options_.backoff_factor));
  }
  state_.scale = options_.init_scale;
}

at::Tensor GradScaler::scale_loss(const at::Tensor& loss) const {
  return enabled() ? loss * state_.scale : loss;
}

bool GradScaler::unscale_and_check(const std::vector<ParamGroup>& groups) const {
  // GradScaler computes 1/scale in fp64 and applies it as an fp32 number.
  const float inv_scale = static_cast<float>(1.0 / state_.scale);
  RECORD_USER_SCOPE(ops::region::kOptimizer);
  bool found_inf = false;
  for (const auto& group : groups) {
    for (const auto& p : group.params) {
      auto& g = p.mutable_grad();
      if (!g.defined()) continue;
      TORCH_CHECK(!enabled() || g.scalar_type() == at::kFloat || g.scalar_type() == at::kDouble,
                  "loss scaling needs fp32 master gradients, found ", g.scalar_type());
      if (const auto finite = ops::scale_and_check_finite(g, inv_scale, enabled())) {  // one pass (ops/fused_optimizer.h)
        found_inf = found_inf || !*finite;
        continue;
      }
      if (enabled()) g.mul_(inv_scale);
      if (!found_inf) found_inf = !at::isfinite(g).all().item<bool>();
    }
  }
  return found_inf;
}

void GradScaler::update(bool found_inf) {
  if (!enabled()) return;
  if (found_inf) {
    state_.scale *= options_.backoff_factor;
    state_.growth_tracker = 0;
    return;
  }
  if (++state_.growth_tracker == options_.growth_interval) {
    const double grown = state_.scale * options_.growth_factor;
    // The scale is an fp32 tensor in PyTorch: growth past fp32's range is not applied.
    if (std::isfinite(static_cast<float>(grown))) state_.scale = grown;
    state_.growth_tracker = 0;
  }
}

}  // namespace ctune::train
