// Qwen3 (dense): Llama's block with an RMSNorm over head_dim on every query and key head,
// after the projections and before RoPE (q_norm, k_norm: weights [head_dim]); attention_bias
// puts biases on q/k/v/o (off in every released checkpoint); head_dim is explicit (128 when
// absent, Qwen3Config's default). Windows as Qwen2's (qwen_layer_windows).
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);
  c.arch.mlp_bias = false;  // Qwen3MLP has no biases and no mlp_bias key
  c.arch.qk_norm = true;
  c.arch.layer_windows = qwen_layer_windows(j, where, c.num_hidden_layers);
}
}  // namespace

const Family& qwen3() {
  auto tensors = llama_gguf_layer_tensors();
  tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}});
  static const Family f{"qwen3", {"qwen3"}, 32768, 128, parse, {"qwen3", false, tensors}};
  return f;
}

}  // namespace ctune::model::families
