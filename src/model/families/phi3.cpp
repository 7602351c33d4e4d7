// Phi-3, Phi-3.5, Phi-4 and Phi-4-mini (modeling_phi3.py): Llama's block with
//   - fused projections, kept fused in memory and on disk: self_attn.qkv_proj holds the q, k and
//     v rows one after the other, mlp.gate_up_proj the gate rows then the up rows; the math
//     splits them (PEFT targets them by these names);
//   - partial_rotary_factor: only the leading rotary_dim = head_dim * factor dimensions of each
//     head rotate (Phi-4-mini: 0.75);
//   - longrope scaling: per-dimension short_factor, switched to long_factor for a forward whose
//     largest position reaches original_max_position_embeddings, cos and sin times the
//     attention factor (model/rope.h);
//   - sliding_window, when set, on every layer.
// resid_pdrop / embd_pdrop above 0 (dropouts ctune does not apply) and lm_head_bias are refused.
// Phi3Attention has no projection biases whatever attention_bias says, so the key is not read.
// Defaults as Phi3Config: 4096 positions, untied. GGUF: llama.cpp's phi3 (export/gguf_metadata.cpp).
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.activation = read_activation(j, where, "hidden_act", "silu");
  c.arch.fused_qkv = true;
  c.arch.fused_gate_up = true;
  for (const char* key : {"resid_pdrop", "embd_pdrop"}) {
    if (const auto p = json_number(j, key, where); p && *p != 0.0) {
      throw UnsupportedError(where + ": " + key + " " + std::to_string(*p) +
                             " is not supported (ctune applies no residual or embedding dropout; expected 0.0)");
    }
  }
  if (json_bool(j, "lm_head_bias", where).value_or(false))
    throw UnsupportedError(where + ": lm_head_bias true is not supported (expected false)");
  if (const auto window = read_sliding_window(j, where))
    c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), *window);
}
}  // namespace

const Family& phi3() {
  static const Family f = [] {
    Family p{"phi3", {"phi3"}, 4096, std::nullopt, parse,
             {"phi3", false,
              {{"input_layernorm", "attn_norm"}, {"self_attn.qkv_proj", "attn_qkv"}, {"self_attn.o_proj", "attn_output"},
               {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}}}};
    p.partial_rotary = true;
    return p;
  }();
  return f;
}

}  // namespace ctune::model::families
