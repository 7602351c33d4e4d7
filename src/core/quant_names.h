// The quantised bases' names and defaults, in one place: the recipe schema (its allowed values
// and defaults for memory.quantize_base and memory.*) and quant::QuantSpec (its initialisers,
// its names in logs) both read them. It lives in core because the schema knows nothing of
// tensors. The storage formulas live beside the formats (quant/storage_bytes.h).
#pragma once

#include <cstdint>

namespace ctune {

inline constexpr const char* kQuantNone = "none";
inline constexpr const char* kQuantInt8 = "int8";
inline constexpr const char* kQuantNf4 = "nf4";

// The int8 kernels (quant/int8.h).
inline constexpr const char* kInt8KernelDequantize = "dequantize";  // the faster on the measured CPU (bench_quant)
inline constexpr const char* kInt8KernelGemm = "int8_gemm";

// bitsandbytes' defaults: llm_int8_threshold, bnb_4bit blocksize, bnb_4bit_use_double_quant.
inline constexpr double kInt8ThresholdDefault = 6.0;
inline constexpr std::int64_t kNf4BlocksizeDefault = 64;
inline constexpr bool kNf4DoubleQuantDefault = true;

}  // namespace ctune
