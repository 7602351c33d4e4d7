#include "peft/model_spec.h"

#include "core/log.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "peft/adapter_io.h"

namespace ctune::peft {

model::CausalLM build_model(const ModelSpec& spec) {
  auto lm = model::load_causal_lm(spec.weights, spec.storage_dtype);
  if (!spec.adapter.empty()) {
    load_adapter(lm, spec.adapter);
  } else if (spec.new_adapter) {
    apply_lora(lm, *spec.new_adapter);
  }
  for (auto& p : lm->parameters(true)) p.set_requires_grad(false);
  if (spec.quantize_base) {
    const auto q = model::quantize_base(lm, *spec.quantize_base);
    spdlog::info("base quantised to {}: {} projection weights, {:.1f} MB -> {:.1f} MB", quant::quant_kind_name(spec.quantize_base->kind),
                 q.layers, static_cast<double>(q.bytes_before) / 1e6, static_cast<double>(q.bytes_after) / 1e6);
  }
  lm->to(spec.device);  // loaded on the host; frozen copies in the compute dtype are made there
  lm->set_recompute(spec.recompute);
  if (spec.compute_dtype != at::kFloat) lm->set_compute_dtype(spec.compute_dtype);
  return lm;
}

}  // namespace ctune::peft
