// The Llama-family decoder (Llama 2/3, Mistral, Qwen2, SmolLM, TinyLlama) as torch::nn
// modules whose parameter names are exactly Hugging Face's (model.layers.0.self_attn.q_proj.weight),
// so checkpoints map one to one.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "model/attention.h"
#include "model/config.h"
#include "model/layers.h"

namespace ctune::model {

// down(silu(gate(x)) * up(x))
class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& config, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

// Pre-norm block: h = x + attn(norm(x)); out = h + mlp(norm(h)).
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask);

  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// Embeddings, blocks and final norm: HF's LlamaModel (the "model." prefix).
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const ModelConfig& config, at::ScalarType dtype);
  // ids: [B, T]; attention_mask: [B, T] (1 token, 0 padding) or undefined; -> [B, T, H]
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& attention_mask, const at::Tensor& position_ids);

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  at::Tensor inv_freq;  // [d/2] fp32; not a parameter and not saved (HF's non-persistent buffer)
};
TORCH_MODULE(Decoder);

// Decoder plus the output head (HF's LlamaForCausalLM). With tie_word_embeddings the head
// shares the embedding matrix and has no parameter of its own.
class CausalLMImpl : public torch::nn::Module {
 public:
  CausalLMImpl(ModelConfig config, at::ScalarType dtype);

  // -> logits [B, T, V]. position_ids default to 0..T-1, or to the running count of real
  // tokens when an attention mask marks left padding (as HF generate does).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& position_ids = {});
  const ModelConfig& config() const { return config_; }
  // The head's weight: lm_head.weight, or the embedding when tied.
  const at::Tensor& head_weight() const;

  Decoder model{nullptr};
  Linear lm_head{nullptr};  // null when tied

 private:
  ModelConfig config_;
};
TORCH_MODULE(CausalLM);

at::ScalarType parse_dtype(const std::string& name, const std::string& where);
std::string dtype_to_hf(at::ScalarType dtype);  // "float32", "bfloat16", "float16"

}  // namespace ctune::model
