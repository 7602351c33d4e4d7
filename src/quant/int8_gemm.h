// The int8×int8→int32 GEMM LibTorch 1.13 CPU offers: the quantized engine's dynamic linear
// (`quantized::linear_prepack` + `quantized::linear_dynamic`, oneDNN engine; on this CPU oneDNN
// uses AMX/VNNI int8 instructions), reached through the c10 dispatcher (no fbgemm in Debian's
// build, and ATen has no plain int8 mm in 1.13). Internal to quant/ but for int8_gemm_available().
#pragma once

#include <ATen/ATen.h>

#include <mutex>
#include <string>

#include "quant/int8_weight.h"

namespace ctune::quant {

// Whether Int8Kernel::Int8Gemm can run in this process: the oneDNN quantized engine is compiled
// in, and this CPU sums int8 products in int32 (VNNI); else why not, for messages.
bool int8_gemm_available();
std::string int8_gemm_unavailable_reason();

}  // namespace ctune::quant

namespace ctune::quant::detail {

// The prepacked weight (a LinearPackedParamsBase custom-class object), built once.
struct PackedInt8 {
  std::once_flag once;
  c10::IValue params;
  std::int64_t bytes = 0;
};

// ca: fp32 [m, in] holding integers in [-127, 127] (the row-quantised activations).
// Returns fp32 [m, out] = (ca · cbᵀ accumulated in int32) · scb / 127, exact up to the final fp32
// multiply. The weight is prepacked on the first call.
at::Tensor int8_gemm_rows(const at::Tensor& ca, const Int8Weight& w);

}  // namespace ctune::quant::detail
