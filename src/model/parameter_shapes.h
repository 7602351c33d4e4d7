// A model's parameters by name and shape, read from a built model (a shape-only one at planning:
// model/decoder.h constructed without weights read). The one count of a model's parameters
// (`ctune info`, `init`, the plan's summary, the generation ledger) and what the training
// ledger walks, so a family's extra norms or biases are counted because the model has them,
// not because a formula remembered them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "model/config.h"

namespace ctune::model {

struct ParameterShape {
  std::string name;  // Hugging Face's: model.layers.0.self_attn.q_proj.weight
  std::vector<std::int64_t> sizes;

  std::int64_t numel() const;
  // The module holding it by its leaf name: q_proj, input_layernorm, embed_tokens, norm, lm_head.
  std::string module() const;
  // The decoder layer it belongs to (model.layers.N.*); -1 outside the blocks.
  std::int64_t layer() const;
  bool is_weight() const;  // "weight" rather than "bias"
};

// Every parameter in registration order (embedding, blocks, final norm, head). Taken before
// quantisation: a quantised weight's registered tensor is emptied (model/quantize.h).
std::vector<ParameterShape> parameter_shapes(const torch::nn::Module& model);

// Those of the model `config` describes: a shape-only CausalLM built and dropped (its storage is
// reserved uninitialised, never touched, so a large model costs address space, not memory).
std::vector<ParameterShape> parameter_shapes(const ModelConfig& config);

std::int64_t parameter_count(const std::vector<ParameterShape>& shapes);

}  // namespace ctune::model
