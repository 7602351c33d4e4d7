// Per-layer attention kinds as transformers' configs spell them (layer_types), shared by the
// families that have them.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

std::optional<std::vector<bool>> read_layer_types(const Json& j, const std::string& where, std::int64_t layers) {
  const auto it = j.find("layer_types");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
    throw ConfigError(where + ": \"layer_types\" must list one entry per layer (" + std::to_string(layers) + "), found " +
                      it->dump());
  }
  std::vector<bool> sliding;
  for (const Json& t : *it) {
    if (t != "full_attention" && t != "sliding_attention") {
      throw UnsupportedError(where + ": layer_types entry " + t.dump() +
                             " is not supported (expected full_attention or sliding_attention)");
    }
    sliding.push_back(t == "sliding_attention");
  }
  return sliding;
}

std::vector<std::int64_t> sliding_layer_windows(const Json& j, const std::string& where, const std::vector<bool>& sliding) {
  // Transformers sets the window to None unless use_sliding_window: a "sliding_attention"
  // layer then attends globally.
  const auto window = read_sliding_window(j, where);
  if (!window || !json_bool(j, "use_sliding_window", where).value_or(false)) return {};
  std::vector<std::int64_t> windows(sliding.size(), 0);
  for (std::size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i]) windows[i] = *window;
  return windows;
}

}  // namespace ctune::model::families
