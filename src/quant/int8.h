// LLM.int8() (bitsandbytes, docs/formats.md#llmint8): vector-wise int8 weights, one fp32 absmax
// per output row, and the forward matmul with outlier decomposition. Two kernels compute it:
//   Dequantize: W is dequantised to x's dtype and multiplied with a bf16/fp32 GEMM. Activations
//               are NOT quantised, so the outlier split is the identity here (every column is
//               effectively on the "mixed-precision" path) and `threshold` has no effect.
//   Int8Gemm:   the real LLM.int8 numerics: activations quantised per row to int8 (outlier
//               columns zeroed and computed in x's dtype against dequantised weight columns),
//               int8×int8→int32 GEMM through LibTorch's oneDNN quantized engine (int8_gemm.h).
// Memory: cb [out, in] int8 + scb [out] fp32. Int8Gemm adds oneDNN's prepacked copy on first use.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "quant/int8_gemm.h"
#include "quant/int8_weight.h"

namespace ctune::quant {

enum class Int8Kernel { Dequantize, Int8Gemm };

const char* int8_kernel_name(Int8Kernel kernel);
Int8Kernel parse_int8_kernel(const std::string& text);  // "dequantize" | "int8_gemm"; ConfigError otherwise


// w: [out, in], any floating dtype (computed in fp32).
Int8Weight quantize_int8(const at::Tensor& w);

// [out, in] in `dtype`: cb · scb / 127, computed in fp32 and rounded to dtype.
at::Tensor dequantize(const Int8Weight& w, at::ScalarType dtype);

// Columns `cols` (int64 [k]) of the dequantised weight: [out, k] in dtype.
at::Tensor dequantize_columns(const Int8Weight& w, const at::Tensor& cols, at::ScalarType dtype);

// x: [.., in] -> [.., out] in x's dtype. threshold > 0: activation columns holding any
// |x| >= threshold are outlier columns (Int8Gemm only; 0 disables).
at::Tensor int8_matmul(const at::Tensor& x, const Int8Weight& w, double threshold, Int8Kernel kernel);


}  // namespace ctune::quant
