// SmolLM3: Llama's block and keys with NoPE layers: no_rope_layers[i] == 1 where layer i applies
// RoPE, 0 where it does not (by default every no_rope_layer_interval-th layer, 4, is NoPE).
// Windows (SmolLM3Config's layer_types): given, or sliding on the NoPE layers, and applied only
// with use_sliding_window. Defaults: tied head, rope_theta 2e6, 32768 positions. GGUF:
// llama.cpp's `smollm3` (Llama's names and q/k row order), whose NoPE step is fixed at 4.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

namespace {
std::vector<bool> rope_layers(const Json& j, const std::string& where, std::int64_t layers) {
  std::vector<bool> rope(static_cast<std::size_t>(layers), true);
  const auto it = j.find("no_rope_layers");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<std::int64_t>(it->size()) < layers) {
      throw ConfigError(where + ": \"no_rope_layers\" must list at least one 0/1 entry per layer (" + std::to_string(layers) +
                        "), found " + it->dump());
    }
    for (std::int64_t i = 0; i < layers; ++i) {
      const Json& v = (*it)[static_cast<std::size_t>(i)];
      if (v != 0 && v != 1) throw ConfigError(where + ": no_rope_layers entries must be 0 or 1, found " + v.dump());
      rope[static_cast<std::size_t>(i)] = v == 1;
    }
    return rope;
  }
  const std::int64_t interval = json_int(j, "no_rope_layer_interval", where).value_or(4);
  if (interval <= 0) throw ConfigError(where + ": no_rope_layer_interval must be positive, found " + std::to_string(interval));
  for (std::int64_t i = 0; i < layers; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
  return rope;
}

void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);
  c.arch.rope_layers = rope_layers(j, where, c.num_hidden_layers);
  // SmolLM3Config's layer_types default: the NoPE layers slide.
  auto sliding = read_layer_types(j, where, c.num_hidden_layers);
  if (!sliding) {
    sliding.emplace();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) sliding->push_back(!c.arch.rope(i));
  }
  c.arch.layer_windows = sliding_layer_windows(j, where, *sliding);
}

// llama.cpp's smollm3 fixes the NoPE layers at every 4th (layer i rotates when (i + 1) % 4 != 0)
// and loads no o_proj or MLP biases and no rope_freqs.
std::vector<bool> llama_cpp_rope_layers(std::int64_t layers) {
  std::vector<bool> rope(static_cast<std::size_t>(layers));
  for (std::int64_t i = 0; i < layers; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % 4 != 0;
  return rope;
}

void check_gguf(const ModelConfig& c) {
  const std::string what = gguf_refusal(c);
  std::vector<bool> rope;
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) rope.push_back(c.arch.rope(i));
  if (rope != llama_cpp_rope_layers(c.num_hidden_layers))
    throw UnsupportedError(what + "no_rope_layers has no smollm3 GGUF form (llama.cpp's smollm3 skips RoPE on every 4th layer, "
                           "no_rope_layer_interval 4)");
  if (c.rope.type != "default" && c.rope.type != "linear")
    throw UnsupportedError(what + c.rope.type + " rope scaling has no smollm3 GGUF form (expected none or linear)");
  if (c.arch.o_bias || c.arch.mlp_bias) throw UnsupportedError(what + "o_proj/MLP biases have no smollm3 GGUF form");
}

void read_gguf(const GgufKeys&, ModelConfig& c) { c.arch.rope_layers = llama_cpp_rope_layers(c.num_hidden_layers); }
}  // namespace

const Family& smollm3() {
  static const Family f = [] {
    Family s{"smollm3", {"smollm3"}, 32768, std::nullopt, parse, {"smollm3", true, llama_gguf_layer_tensors()}, 2000000.0, true};
    s.gguf.check = check_gguf;
    s.gguf.read_keys = read_gguf;
    return s;
  }();
  return f;
}

}  // namespace ctune::model::families
