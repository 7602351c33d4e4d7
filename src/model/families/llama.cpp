// Llama 2/3 (and SmolLM, TinyLlama): the base the Architecture's defaults describe.
// attention_bias puts biases on q/k/v/o; mlp_bias on the MLP's three projections. Every layer
// attends over the whole causal context: LlamaConfig has no window (a sliding_window key is
// not read, as transformers does not read it).
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

Activation read_activation(const Json& j, const std::string& where, const char* key, const char* fallback) {
  const std::string act = json_string(j, key, where).value_or(fallback);
  if (act == "silu" || act == "swish") return Activation::silu;
  // transformers' gelu_new and gelu_pytorch_tanh are the same tanh approximation.
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return Activation::gelu_tanh;
  throw UnsupportedError(where + ": " + key + " \"" + act + "\" is not supported (expected silu or gelu_pytorch_tanh)");
}

void parse_llama_keys(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.activation = read_activation(j, where, "hidden_act", "silu");
  const bool attention_bias = json_bool(j, "attention_bias", where).value_or(false);
  c.arch.qkv_bias = attention_bias;
  c.arch.o_bias = attention_bias;
  c.arch.mlp_bias = json_bool(j, "mlp_bias", where).value_or(false);
}

const Family& llama() {
  static const Family f{"llama", {"llama"}, 2048, std::nullopt, parse_llama_keys, {"llama", true, llama_gguf_layer_tensors()}};
  return f;
}

}  // namespace ctune::model::families
