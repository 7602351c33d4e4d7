// LoRA (Hu et al. 2021) as PEFT implements it: y = W x + s * B A dropout(x), s = alpha / r
// (alpha / sqrt(r) with rsLoRA), A Kaiming-uniform (a = sqrt(5)), B zero, so training starts
// from the base model exactly. Adapters attach to the model's Linear layers by their leaf
// names, as the model's family has them (q_proj ... down_proj, lm_head; PEFT's all-linear:
// every one but the output head); everything else is frozen. Facts: docs/formats.md#peft-lora-adapters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder.h"

namespace ctune::peft {

struct LoraOptions {
  std::int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  bool rslora = false;
  std::vector<std::string> targets = {"q_proj", "v_proj"};
  std::uint64_t seed = 0;  // initialisation of A
  bool initialise = true;  // false: a shape-only model's adapters (planning), no memory touched
  at::ScalarType dtype = at::kFloat;  // adapters train in fp32 whatever the base dtype
  // PEFT's modules_to_save: whole modules that train beside the adapters and are saved with
  // them. ctune's: "gate", the routers of a model with experts (peft.train_router).
  std::vector<std::string> modules_to_save = {};
};

// The routers that train and are saved with the adapter (RouterImpl::saved_with_adapter), by
// parameter name (model.layers.1.mlp.gate.weight).
std::vector<std::pair<std::string, at::Tensor>> adapter_saved_modules(model::CausalLM& model);

double lora_scale(const LoraOptions& options);

// The leaf names of the model's Linear layers, in registration order (q_proj, ..., lm_head).
std::vector<std::string> linear_layer_names(model::CausalLM& model);
// `targets` checked against the model and "all-linear" expanded (every Linear layer but
// lm_head, as PEFT does), duplicates dropped: ConfigError naming peft.target_modules for a
// name the model has no Linear layer of, or lm_head on a tied head.
std::vector<std::string> resolve_targets(model::CausalLM& model, const std::vector<std::string>& targets);

// The adapter on one Linear. A: [r, in], B: [out, r], registered as the Linear's children.
class LoraAdapter : public model::LinearAdapter {
 public:
  LoraAdapter(model::LinearImpl& owner, const LoraOptions& options, at::Generator& gen);
  at::Tensor apply(const at::Tensor& x, const at::Tensor& base) override;

  model::Linear lora_A{nullptr}, lora_B{nullptr};
  double scale;
  double dropout;

 private:
  model::LinearImpl* owner_;  // owns this adapter; used for its training flag
};

struct LoraSummary {
  std::vector<std::string> wrapped;  // module names, e.g. model.layers.0.self_attn.q_proj
  std::int64_t trainable = 0;        // parameters
  std::int64_t total = 0;            // parameters, base included
};

// Freezes every base parameter and attaches adapters to the target layers; the modules_to_save
// (the routers) get fp32 weights of their own and train. Throws ConfigError when a target
// matches no layer (e.g. lm_head on a model with tied embeddings), or a module to save none.
LoraSummary apply_lora(model::CausalLM& model, const LoraOptions& options);

// Folds every adapter into its base weight, W' = W + s * B A computed in fp32 and cast to W's
// dtype, and detaches the adapters (their tensors stay registered but no longer apply and are
// never saved with the model); trained routers are cast to the embeddings' dtype and become the
// model's. Returns the number of layers merged.
std::size_t merge_lora(model::CausalLM& model);

// After load_adapter: only the adapters (and the routers saved with them) train; the base stays
// frozen. Returns the counts.
LoraSummary enable_lora_training(model::CausalLM& model);

// Marks every parameter trainable (full fine-tuning) and returns the counts.
LoraSummary enable_full_finetune(model::CausalLM& model);

}  // namespace ctune::peft
