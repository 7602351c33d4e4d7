// Qwen2 / Qwen2.5: biases on q/k/v always (none on o_proj). Windows as Qwen2Config's
// layer_types: that list when config.json has it, else "sliding_attention" for the layers at or
// past max_window_layers (default 28) when use_sliding_window; the window is sliding_window.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

std::vector<std::int64_t> qwen_layer_windows(const Json& j, const std::string& where, std::int64_t layers) {
  auto sliding = read_layer_types(j, where, layers);
  if (!sliding) {
    sliding.emplace(static_cast<std::size_t>(layers), false);
    const std::int64_t first = json_int(j, "max_window_layers", where).value_or(28);
    for (std::int64_t i = std::max<std::int64_t>(first, 0); i < layers; ++i) (*sliding)[static_cast<std::size_t>(i)] = true;
  }
  return sliding_layer_windows(j, where, *sliding);
}

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.activation = read_activation(j, where, "hidden_act", "silu");
  c.arch.qkv_bias = true;
  c.arch.o_bias = false;
  c.arch.mlp_bias = json_bool(j, "mlp_bias", where).value_or(false);
  c.arch.layer_windows = qwen_layer_windows(j, where, c.num_hidden_layers);
}

// llama.cpp's qwen2: q/k/v biases only, rows of hidden width for the queries, no rope_freqs.
void check_gguf(const ModelConfig& c) {
  const std::string what = gguf_refusal(c);
  refuse_rope_freqs(c, "qwen2");
  if (c.arch.o_bias || c.arch.mlp_bias) throw UnsupportedError(what + "o_proj/MLP biases have no qwen2 GGUF form");
  if (c.num_attention_heads * c.head_dim != c.hidden_size)
    throw UnsupportedError(what + "heads x head_dim (" + std::to_string(c.num_attention_heads * c.head_dim) +
                           ") must equal hidden_size (" + std::to_string(c.hidden_size) + ") for llama.cpp's qwen2");
}
}  // namespace

const Family& qwen2() {
  static const Family f = [] {
    Family q{"qwen2", {"qwen2"}, 32768, std::nullopt, parse, {"qwen2", false, llama_gguf_layer_tensors()}};
    q.gguf.check = check_gguf;
    return q;
  }();
  return f;
}

}  // namespace ctune::model::families
