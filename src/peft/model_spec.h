// The one way ctune builds a model from files. `train`, `eval`, `generate`, `score` and `merge`'s
// self-check all describe the model they need as a ModelSpec and get it from build_model(), so a
// model evaluated, sampled or scored is the model that was trained: the same storage and compute
// dtypes, the same adapter, the same quantised base.
#pragma once

#include <filesystem>
#include <optional>

#include "model/decoder.h"
#include "model/recompute.h"
#include "peft/lora.h"
#include "quant/quantized_linear.h"

namespace ctune::peft {

struct ModelSpec {
  std::filesystem::path weights;              // Hugging Face model directory
  at::ScalarType storage_dtype = at::kFloat;  // dtype the weights are loaded in
  at::ScalarType compute_dtype = at::kFloat;  // the matmuls' dtype (precision); fp32: as stored
  std::filesystem::path adapter;              // a PEFT adapter to load; empty: none
  std::optional<LoraOptions> new_adapter;     // or a freshly initialised LoRA to attach
  std::optional<quant::QuantSpec> quantize_base;  // the projections quantised (frozen base)
  model::RecomputePolicy recompute;           // activation checkpointing (training only)
  at::Device device = at::kCPU;               // where the model lives once built
};

// Loads the weights, attaches the adapter, quantises the base, moves the model to its device, sets
// recomputation and the compute dtype, in that order. Nothing in the returned model trains (requires_grad is off everywhere):
// a training method marks what does (train/method/method.h).
model::CausalLM build_model(const ModelSpec& spec);

}  // namespace ctune::peft
