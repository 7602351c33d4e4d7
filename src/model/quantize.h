// QLoRA-style frozen bases: the decoder's projection weights (q/k/v/o_proj, gate/up/down_proj
// of every layer) are stored quantised (LLM.int8 or NF4, quant/) and dequantised just in time
// in forward and backward; the embedding, the norms and the output head stay in their dtype,
// as bitsandbytes leaves lm_head unquantised. Only for frozen weights: LoRA trains beside them.
#pragma once

#include <cstdint>
#include <string>

#include "model/decoder.h"
#include "quant/quantized_linear.h"

namespace ctune::model {

struct QuantizeSummary {
  std::int64_t layers = 0;        // Linear layers quantised
  std::int64_t bytes_before = 0;  // their weights as they were stored
  std::int64_t bytes_after = 0;   // the quantised formats (quant::QuantizedWeight::bytes)
};

// Whether quantize_base stores a Linear module at `path` quantised (the caller knows the module
// is a Linear; a norm's path passes too): every Linear of the
// blocks (model.layers.N.self_attn.q_proj, ..., model.layers.N.mlp.down_proj, whatever the
// family names them); the embedding, norms and lm_head stay dense.
bool is_quantized_module(const std::string& path);

// Quantises every projection weight in place (the dense weight is released). Parameters left
// dense are copied out of any memory-mapped checkpoint file, so the file's pages can be unmapped.
QuantizeSummary quantize_base(CausalLM& model, const quant::QuantSpec& spec);

}  // namespace ctune::model
