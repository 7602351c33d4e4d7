// Qwen3 (dense): Llama's block with an RMSNorm over head_dim on every query and key head,
// after the projections and before RoPE (q_norm, k_norm: weights [head_dim]); attention_bias
// puts biases on q/k/v/o (off in every released checkpoint); head_dim is explicit (128 when
// absent, Qwen3Config's default). Sliding windows: layers at or past max_window_layers when
// use_sliding_window, or those layer_types marks "sliding_attention".
#include <algorithm>

#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {
bool any_sliding_layer(const Json& j, const std::string& where, std::int64_t layers) {
  const auto it = j.find("layer_types");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
      throw ConfigError(where + ": \"layer_types\" must list one entry per layer (" + std::to_string(layers) + "), found " +
                        it->dump());
    }
    bool sliding = false;
    for (const auto& t : *it) {
      if (t != "full_attention" && t != "sliding_attention") {
        throw UnsupportedError(where + ": layer_types entry " + t.dump() +
                               " is not supported (expected full_attention or sliding_attention)");
      }
      sliding = sliding || t == "sliding_attention";
    }
    return sliding;
  }
  if (!json_bool(j, "use_sliding_window", where).value_or(false)) return false;
  return json_int(j, "max_window_layers", where).value_or(28) < layers;
}

void parse(const Json& j, const std::string& where, ModelConfig& c) {
  const bool attention_bias = json_bool(j, "attention_bias", where).value_or(false);
  c.arch.qkv_bias = attention_bias;
  c.arch.o_bias = attention_bias;
  c.arch.mlp_bias = false;
  c.arch.qk_norm = true;
  c.arch.sliding_window = read_sliding_window(j, where, any_sliding_layer(j, where, c.num_hidden_layers));
}
}  // namespace

const Family& qwen3() {
  auto tensors = llama_gguf_layer_tensors();
  tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}});
  static const Family f{"qwen3", {"qwen3"}, 32768, 128, parse, {"qwen3", false, tensors}};
  return f;
}

}  // namespace ctune::model::families
