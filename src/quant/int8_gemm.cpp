#include "quant/int8_gemm.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <algorithm>

#include "core/error.h"
#include "ops/cpu_features.h"

namespace ctune::quant {

bool int8_gemm_engine() {
  const auto& engines = at::globalContext().supportedQEngines();
  return std::find(engines.begin(), engines.end(), at::QEngine::ONEDNN) != engines.end();
}

bool int8_gemm_available() { return int8_gemm_engine() && ops::cpu_features::int32_int8_dot_products(); }

std::string int8_gemm_unavailable_reason() {
  if (!int8_gemm_engine()) return "the oneDNN quantized engine is not compiled into this LibTorch";
  return "this CPU has no VNNI (avx512_vnni or avx_vnni), without which oneDNN's int8 GEMM saturates its int16 sums";
}

std::int64_t Int8Weight::packed_bytes() const { return packed ? packed->bytes : 0; }

namespace detail {

namespace {

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// Prepacking reads the process-wide quantized engine; set oneDNN for the call and put the
// previous engine back (the packed object remembers its engine, applying it does not consult it).
struct OnednnEngine {
  OnednnEngine() : saved(at::globalContext().qEngine()) { at::globalContext().setQEngine(at::QEngine::ONEDNN); }
  ~OnednnEngine() { at::globalContext().setQEngine(saved); }
  at::QEngine saved;
};

void prepack(PackedInt8& packed, const Int8Weight& w) {
  if (!int8_gemm_available()) {
    throw UnsupportedError("int8 GEMM: " + int8_gemm_unavailable_reason() + " (use quantize_base int8 with int8_kernel dequantize)");
  }
  // Per-channel symmetric qint8: the stored value is cb, its scale scb/127 (1 for an all-zero row,
  // whose codes are all 0 and whose scale therefore does not matter; oneDNN rejects scale 0).
  auto scb = w.scb.to(at::kDouble);
  auto scales = at::where(scb > 0, scb / 127.0, at::ones_like(scb));
  auto zero_points = at::zeros({w.out_features()}, at::kLong);
  auto qweight = at::_make_per_channel_quantized_tensor(w.cb.contiguous(), scales, zero_points, 0);
  OnednnEngine engine;
  torch::jit::Stack stack{qweight, c10::IValue()};
  op("quantized::linear_prepack").callBoxed(&stack);
  packed.params = std::move(stack.at(0));
  // oneDNN's packed object keeps the original qint8 weight and a reordered copy.
  packed.bytes = 2 * w.cb.numel();
}

}  // namespace

at::Tensor int8_gemm_rows(const at::Tensor& ca, const Int8Weight& w) {
  TORCH_CHECK(ca.dim() == 2 && ca.size(1) == w.in_features() && ca.scalar_type() == at::kFloat,
              "int8_gemm_rows: ca must be fp32 [m, ", w.in_features(), "], found ", ca.scalar_type(), " ", ca.sizes());
  TORCH_CHECK(w.packed, "int8_gemm_rows: weight has no prepack slot (not made by quantize_int8)");
  std::call_once(w.packed->once, [&] { prepack(*w.packed, w); });
  // quantized::linear_dynamic quantises its input per tensor (uint8, asymmetric, from the
  // tensor's min and max). Two sentinel rows pin that range to exactly [-127, 128], so the scale
  // is 1 and the zero point 127: every integer in ca is represented exactly, the int32 GEMM is
  // exactly Σ ca·cb, and the output is that sum · 1 · scb/127. Per-row activation scaling (the
  // row_stats of LLM.int8) is applied by the caller, outside the GEMM. Without the sentinels the
  // per-tensor scale would add a second rounding of the activations (a deviation from §4).
  auto sentinels = at::zeros({2, ca.size(1)}, ca.options());
  sentinels.index_put_({0, 0}, 128.0);
  sentinels.index_put_({1, 0}, -127.0);
  torch::jit::Stack stack{at::cat({ca, sentinels}, 0), w.packed->params, /*reduce_range=*/false};
  op("quantized::linear_dynamic").callBoxed(&stack);
  return stack.at(0).toTensor().narrow(0, 0, ca.size(0));
}

}  // namespace detail

}  // namespace ctune::quant
