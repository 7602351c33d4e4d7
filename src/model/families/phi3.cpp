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
// Defaults as Phi3Config: 4096 positions, untied. GGUF: llama.cpp's phi3, below.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

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

// llama.cpp's phi3: fused qkv of hidden rows for the queries (so heads x head_dim = hidden), NEOX
// RoPE over rope.dimension_count dimensions, longrope factors as two tensors. Its loader reads
// sliding_window but disables Phi windows (llama.cpp PR 13676), so the key is written, as
// convert_hf_to_gguf writes it, and outputs agree up to the window.
void check_gguf(const ModelConfig& c) {
  const std::string what = gguf_refusal(c);
  if (c.num_attention_heads * c.head_dim != c.hidden_size)
    throw UnsupportedError(what + "heads x head_dim (" + std::to_string(c.num_attention_heads * c.head_dim) +
                           ") must equal hidden_size (" + std::to_string(c.hidden_size) + ") for llama.cpp's phi3");
  if (c.rope.type != "default" && c.rope.type != "longrope")
    throw UnsupportedError(what + c.rope.type + " rope scaling has no phi3 GGUF form (expected none or longrope)");
  if (c.arch.qkv_bias || c.arch.o_bias || c.arch.mlp_bias)
    throw UnsupportedError(what + "projection biases have no phi3 GGUF form");
}

void write_gguf(GgufKeyWriter& w, const ModelConfig& c) { w.u32("attention.sliding_window", c.arch.sliding_window().value_or(0)); }

void read_gguf(const GgufKeys& keys, ModelConfig& c) {
  c.arch.fused_qkv = c.arch.fused_gate_up = true;
  read_rotary_dimension(keys, c);
  if (const std::int64_t window = keys.integer_or("attention.sliding_window", 0); window > 0)
    c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), window);
  if (keys.has_tensor(kRopeFactorsLongName)) {  // the factors are read with the tensors (export/gguf_import.cpp)
    c.rope.type = "longrope";
    c.rope.original_max_position = keys.integer_or("rope.scaling.original_context_length", c.max_position_embeddings);
    c.rope.attention_factor = keys.number_or("rope.scaling.attn_factor", 1.0);
  }
}
}  // namespace

const Family& phi3() {
  static const Family f = [] {
    Family p{"phi3", {"phi3"}, 4096, std::nullopt, parse,
             {"phi3", false,
              {{"input_layernorm", "attn_norm"}, {"self_attn.qkv_proj", "attn_qkv"}, {"self_attn.o_proj", "attn_output"},
               {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}}}};
    p.partial_rotary = true;
    p.gguf.windows = GgufForm::Windows::ignored;
    p.gguf.check = check_gguf;
    p.gguf.write_keys = write_gguf;
    p.gguf.read_keys = read_gguf;
    return p;
  }();
  return f;
}

}  // namespace ctune::model::families
