// Qwen2 / Qwen2.5: biases on q/k/v always (none on o_proj). Windows as Qwen2Config's
// layer_types: that list when config.json has it, else "sliding_attention" for the layers at or
// past max_window_layers (default 28) when use_sliding_window; the window is sliding_window.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

std::vector<std::int64_t> qwen_layer_windows(const Json& j, const std::string& where, std::int64_t layers) {
  const auto window = read_sliding_window(j, where);
  const bool use_window = json_bool(j, "use_sliding_window", where).value_or(false);
  std::vector<bool> sliding(static_cast<std::size_t>(layers), false);
  const auto it = j.find("layer_types");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
      throw ConfigError(where + ": \"layer_types\" must list one entry per layer (" + std::to_string(layers) + "), found " +
                        it->dump());
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      if (t != "full_attention" && t != "sliding_attention") {
        throw UnsupportedError(where + ": layer_types entry " + t.dump() +
                               " is not supported (expected full_attention or sliding_attention)");
      }
      sliding[i] = t == "sliding_attention";
    }
  } else if (use_window) {
    const std::int64_t first = json_int(j, "max_window_layers", where).value_or(28);
    for (std::int64_t i = std::max<std::int64_t>(first, 0); i < layers; ++i) sliding[static_cast<std::size_t>(i)] = true;
  }
  // Transformers sets the window to None unless use_sliding_window: a "sliding_attention"
  // layer then attends globally.
  if (!window || !use_window) return {};
  std::vector<std::int64_t> windows(sliding.size(), 0);
  for (std::size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i]) windows[i] = *window;
  return windows;
}

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.qkv_bias = true;
  c.arch.o_bias = false;
  c.arch.mlp_bias = json_bool(j, "mlp_bias", where).value_or(false);
  c.arch.layer_windows = qwen_layer_windows(j, where, c.num_hidden_layers);
}
}  // namespace

const Family& qwen2() {
  static const Family f{"qwen2", {"qwen2"}, 32768, std::nullopt, parse, {"qwen2", false, llama_gguf_layer_tensors()}};
  return f;
}

}  // namespace ctune::model::families
