// SmolLM3: Llama's block and keys with NoPE layers: no_rope_layers[i] == 1 where layer i applies
// RoPE, 0 where it does not (by default every no_rope_layer_interval-th layer, 4, is NoPE).
// Windows (SmolLM3Config's layer_types): given, or sliding on the NoPE layers, and applied only
// with use_sliding_window. Defaults: tied head, rope_theta 2e6, 32768 positions. llama.cpp's
// `smollm3` fixes the NoPE step at 4 and is not yet checked against ctune, so no GGUF form.
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
  const auto window = read_sliding_window(j, where);
  if (!window || !json_bool(j, "use_sliding_window", where).value_or(false)) return;
  const auto types = j.find("layer_types");
  c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), 0);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    bool sliding = !c.arch.rope(i);
    if (types != j.end() && !types->is_null()) {
      if (!types->is_array() || static_cast<std::int64_t>(types->size()) != c.num_hidden_layers)
        throw ConfigError(where + ": \"layer_types\" must list one entry per layer, found " + types->dump());
      const Json& t = (*types)[static_cast<std::size_t>(i)];
      if (t != "full_attention" && t != "sliding_attention")
        throw UnsupportedError(where + ": layer_types entry " + t.dump() + " is not supported (expected full_attention or sliding_attention)");
      sliding = t == "sliding_attention";
    }
    if (sliding) c.arch.layer_windows[static_cast<std::size_t>(i)] = *window;
  }
}
}  // namespace

const Family& smollm3() {
  static const Family f{"smollm3", {"smollm3"}, 32768, std::nullopt, parse, {"", false, llama_gguf_layer_tensors()}, 2000000.0, true};
  return f;
}

}  // namespace ctune::model::families
