#include "model/quantize.h"

#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <string>


namespace ctune::model {

// A LoRA adapter's own Linears (q_proj.lora_A) train and are never quantised.
bool is_quantized_module(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.find(".lora_") == std::string::npos;
}

QuantizeSummary quantize_base(CausalLM& lm, const quant::QuantSpec& spec) {
  at::NoGradGuard no_grad;
  QuantizeSummary s;
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    if (!linear || !is_quantized_module(item.key()) || linear->quantized) continue;
    TORCH_CHECK(!linear->weight.requires_grad(), item.key(), ": only frozen weights can be quantised");
    s.bytes_before += static_cast<std::int64_t>(linear->weight.nbytes());
    linear->quantized = std::make_shared<const quant::QuantizedWeight>(quant::quantize_weight(linear->weight, spec));
    s.bytes_after += linear->quantized->bytes();
    // The dense weight stays registered (names and counts keep their meaning) but holds nothing.
    linear->weight.set_data(at::empty({0}, linear->weight.options()));
    ++s.layers;
  }
  for (auto& p : lm->parameters(/*recurse=*/true)) {
    if (!p.requires_grad() && p.numel() > 0) p.set_data(p.detach().clone());
  }
  return s;
}

}  // namespace ctune::model
