// Qwen3 (dense): Llama's block with an RMSNorm over head_dim on every query and key head,
// after the projections and before RoPE (q_norm, k_norm: weights [head_dim]); attention_bias
// puts biases on q/k/v/o (off in every released checkpoint); head_dim is explicit (128 when
// absent, Qwen3Config's default). Windows as Qwen2's (qwen_layer_windows).
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

void check_qwen3_gguf(const ModelConfig& c, const std::string& arch) {
  if (c.arch.qkv_bias || c.arch.o_bias || c.arch.mlp_bias)
    throw UnsupportedError(gguf_refusal(c) + "attention_bias has no " + arch + " GGUF form (llama.cpp's " + arch +
                           " has no projection biases)");
  refuse_rope_freqs(c, arch);
}

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);
  c.arch.mlp_bias = false;  // Qwen3MLP has no biases and no mlp_bias key
  c.arch.qk_norm = true;
  c.arch.layer_windows = qwen_layer_windows(j, where, c.num_hidden_layers);
}

void check_gguf(const ModelConfig& c) { check_qwen3_gguf(c, "qwen3"); }
}  // namespace

const Family& qwen3() {
  static const Family f = [] {
    auto tensors = llama_gguf_layer_tensors();
    tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}});
    Family q{"qwen3", {"qwen3"}, 32768, 128, parse, {"qwen3", false, tensors}};
    q.gguf.check = check_gguf;
    return q;
  }();
  return f;
}

}  // namespace ctune::model::families
