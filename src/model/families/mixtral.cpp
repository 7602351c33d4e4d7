// Mixtral: Mistral's attention (a window on every layer when sliding_window is set; no biases)
// and a sparse MLP on every layer: `block_sparse_moe` with a router `gate` over
// num_local_experts (8) SwiGLU experts w1 (gate), w3 (up), w2 (down) of intermediate_size,
// num_experts_per_tok (2) per token, their weights always renormalised (MixtralSparseMoeBlock).
// GGUF: llama.cpp reads Mixtral as `llama` with experts (convert_hf_to_gguf's MixtralModel), each
// expert feed_forward_length wide.
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.activation = read_activation(j, where, "hidden_act", "silu");
  if (const auto window = read_sliding_window(j, where))
    c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), *window);
  c.arch.moe.intermediate = c.intermediate_size;
  c.arch.moe.normalize_top_k = true;
  parse_moe_keys(j, where, "num_local_experts", 8, 2, c);
}

void check_gguf(const ModelConfig& c) { check_gguf_experts(c, "llama"); }
}  // namespace

const Family& mixtral() {
  static const Family f = [] {
    auto tensors = llama_gguf_layer_tensors();
    tensors.emplace_back("block_sparse_moe.gate", "ffn_gate_inp");
    Family m{"mixtral", {"mixtral"}, 131072, std::nullopt, parse, {"llama", true, tensors}, 1e6};
    m.names.sparse_mlp = "block_sparse_moe";  // block_sparse_moe.{gate, experts.N.{w1, w3, w2}}
    m.names.expert_gate = "w1";
    m.names.expert_up = "w3";
    m.names.expert_down = "w2";
    m.gguf.experts = true;
    m.gguf.check = check_gguf;
    return m;
  }();
  return f;
}

}  // namespace ctune::model::families
