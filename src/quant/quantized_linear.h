// A frozen quantised Linear weight (QLoRA-style base) and the Linear over it. The forward and
// backward dequantise just in time: the autograd node keeps only a reference to the quantised
// weight (no activation, no dequantised weight), and backward computes grad_x = grad_y · W_deq
// by dequantising again. Weight and bias are frozen: they get no gradient.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/quant_names.h"
#include "quant/int8.h"
#include "quant/nf4.h"

namespace ctune::quant {

// memory.quantize_base and its parameters (HF BitsAndBytesConfig names in comments).
// Defaults and names: core/quant_names.h.
struct QuantSpec {
  enum Kind { Int8, Nf4 } kind = Nf4;
  double threshold = kInt8ThresholdDefault;        // llm_int8_threshold (Int8Gemm only)
  std::int64_t blocksize = kNf4BlocksizeDefault;   // nf4 block size
  bool double_quant = kNf4DoubleQuantDefault;      // bnb_4bit_use_double_quant
  Int8Kernel int8_kernel = Int8Kernel::Dequantize;
};

// "int8" | "nf4" (memory.quantize_base, generate --quantize); ConfigError otherwise.
QuantSpec::Kind parse_quant_kind(const std::string& name);
const char* quant_kind_name(QuantSpec::Kind kind);

struct QuantizedWeight {
  QuantSpec spec;
  std::vector<std::int64_t> shape;  // [out, in]
  std::optional<Int8Weight> int8;
  std::optional<Nf4Weight> nf4;

  std::int64_t out_features() const { return shape[0]; }
  std::int64_t in_features() const { return shape[1]; }
  const char* kind_name() const { return quant_kind_name(spec.kind); }
  std::int64_t bytes() const;     // the stored format (see Int8Weight/Nf4Weight::bytes)
  at::Tensor dequantize(at::ScalarType dtype) const;  // [out, in]
};

// w: [out, in], any floating dtype.
QuantizedWeight quantize_weight(const at::Tensor& w, const QuantSpec& spec);

// x: [.., in] -> [.., out] in compute_dtype (x is cast to it). bias: [out] or undefined (frozen).
// Differentiable with respect to x only; grad_x is returned in x's dtype.
at::Tensor quantized_linear(const at::Tensor& x, const std::shared_ptr<const QuantizedWeight>& w, const at::Tensor& bias,
                            at::ScalarType compute_dtype);

}  // namespace ctune::quant

namespace ctune::quant::detail {

// What the autograd node of a quantized_linear output keeps for backward (for tests).
struct SavedForBackward {
  std::size_t tensors = 0;         // saved tensors (expected 0)
  std::vector<std::string> keys;   // saved_data keys, sorted
  const QuantizedWeight* weight = nullptr;
};
// y must come from quantized_linear with x requiring grad; throws std::invalid_argument otherwise.
SavedForBackward saved_for_backward(const at::Tensor& y);

}  // namespace ctune::quant::detail
