// Leaf modules with Hugging Face parameter names. Parameters are allocated uninitialised
// (torch::empty: no pages touched) because they are almost always replaced by checkpoint
// tensors; init_weights() in weights.h fills them for models trained from scratch.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

#include "core/term.h"
#include "model/config.h"

namespace ctune::quant {
struct QuantizedWeight;
}

namespace ctune::model {

// Something attached to a Linear that changes its output: LoRA (peft/) adds B·A·x. Its
// parameters are registered as children of the Linear ("lora_A", "lora_B"), so they carry
// PEFT's names (model.layers.0.self_attn.q_proj.lora_A.weight).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // x: the layer input [.., in]; base: x W^T + b [.., out]. Returns the layer output.
  virtual at::Tensor apply(const at::Tensor& x, const at::Tensor& base) = 0;
};

// While one is alive, this thread's Linear layers skip their adapters: the model computes as its
// frozen base. Preference tuning's reference under LoRA is the policy with its adapters off (no
// second copy of the weights), as PEFT's disable_adapter() gives TRL.
class AdaptersOff {
 public:
  AdaptersOff();
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;
  static bool active();

 private:
  bool was_;
};

// y = x W^T (+ b). weight: [out, in], as nn.Linear stores it.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x);

  std::int64_t in_features, out_features;
  at::Tensor weight, bias;
  std::shared_ptr<LinearAdapter> adapter;  // null: a plain linear layer
  // Mixed precision (ops/compute.h): the matmul's dtype; Undefined runs in the weight's dtype.
  at::ScalarType compute_dtype = at::ScalarType::Undefined;
  // A frozen base stored quantised (model/quantize.h); `weight` is then empty.
  std::shared_ptr<const quant::QuantizedWeight> quantized;
};
TORCH_MODULE(Linear);

// The decoder projection called `name` (q_proj ... down_proj) with the shape `config` gives it.
Linear projection_linear(const ModelConfig& config, const std::string& name, at::ScalarType dtype);

// weight: [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t num_embeddings, std::int64_t dim, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& ids);  // ids: [B, T] int64 -> [B, T, dim]

  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// RMSNorm as Hugging Face computes it: statistics in fp32, normalised value cast back to the
// input dtype, then scaled by the weight. With `offset` (Gemma) the scale is (1 + w) and is
// applied in fp32, before the cast back; with `scale_fp32` (gpt-oss) w is, and the result is
// cast back to the input's dtype.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, at::ScalarType dtype, bool offset = false, bool scale_fp32 = false);
  at::Tensor forward(const at::Tensor& x);
  // Bytes kept for backward over [rows, dim] of `bytes` per element (model/activation_cost.h).
  static Term saved_activations(const Term& rows, const Term& dim, const Term& bytes);

  double eps;
  bool offset;
  bool scale_fp32 = false;
  at::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// The config's RMSNorm over `dim` (its eps, and (1 + w) when the Architecture says so).
RMSNorm config_norm(const ModelConfig& config, std::int64_t dim, at::ScalarType dtype);

}  // namespace ctune::model
