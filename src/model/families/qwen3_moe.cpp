// Qwen3-MoE: Qwen3's attention (per-head q_norm/k_norm, head_dim hidden / heads when absent) and,
// on the layers decoder_sparse_step (1) selects that mlp_only_layers ([]) does not list, a
// sparse MLP `mlp` with a router `gate` over num_experts (128) SwiGLU experts gate_proj, up_proj,
// down_proj of moe_intermediate_size (768), num_experts_per_tok (8) per token, renormalised only
// with norm_topk_prob (false); the other layers a dense MLP of intermediate_size
// (Qwen3MoeDecoderLayer). A window on every layer when use_sliding_window (the model's one mask).
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);
  c.arch.mlp_bias = false;
  c.arch.qk_norm = true;
  c.arch.layer_windows = sliding_layer_windows(j, where, std::vector<bool>(static_cast<std::size_t>(c.num_hidden_layers), true));
  MoeArchitecture& m = c.arch.moe;
  m.intermediate = json_int(j, "moe_intermediate_size", where).value_or(768);
  m.normalize_top_k = json_bool(j, "norm_topk_prob", where).value_or(false);
  m.sparse_layers = read_sparse_layers(j, where, c.num_hidden_layers);
  parse_moe_keys(j, where, "num_experts", 128, 8, c);
  if (m.experts == 0) m.sparse_layers.assign(m.sparse_layers.size(), false);
}

// llama.cpp's qwen3moe: Qwen3's attention, every layer sparse, the experts' own width.
void check_gguf(const ModelConfig& c) {
  check_gguf_experts(c, "qwen3moe");
  check_qwen3_gguf(c, "qwen3moe");
}

void write_gguf(GgufKeyWriter& w, const ModelConfig& c) {
  if (c.arch.moe.experts > 0) w.u32("expert_feed_forward_length", c.arch.moe.intermediate);
}

void read_gguf(const GgufKeys& keys, ModelConfig& c) {
  if (c.arch.moe.experts > 0) c.arch.moe.intermediate = keys.integer("expert_feed_forward_length");
}
}  // namespace

const Family& qwen3_moe() {
  static const Family f = [] {
    auto tensors = llama_gguf_layer_tensors();
    tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}, {"mlp.gate", "ffn_gate_inp"}});
    Family q{"qwen3_moe", {"qwen3_moe"}, 32768, std::nullopt, parse, {"qwen3moe", false, tensors}};
    q.gguf.experts = true;
    q.gguf.check = check_gguf;
    q.gguf.write_keys = write_gguf;
    q.gguf.read_keys = read_gguf;
    return q;
  }();
  return f;
}

}  // namespace ctune::model::families
