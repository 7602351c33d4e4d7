// SmolLM3: Llama's block and keys with NoPE layers: no_rope_layers[i] == 1 where layer i applies
// RoPE, 0 where it does not (by default every no_rope_layer_interval-th layer, 4, is NoPE).
// Windows (SmolLM3Config's layer_types): given, or sliding on the NoPE layers, and applied only
// with use_sliding_window. Defaults: tied head, rope_theta 2e6, 32768 positions. GGUF:
// llama.cpp's `smollm3` (Llama's names and q/k row order), whose NoPE step is fixed at 4.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

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
}  // namespace

const Family& smollm3() {
  static const Family f{"smollm3", {"smollm3"}, 32768, std::nullopt, parse, {"smollm3", true, llama_gguf_layer_tensors()}, 2000000.0, true};
  return f;
}

}  // namespace ctune::model::families
