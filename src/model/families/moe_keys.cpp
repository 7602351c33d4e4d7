// The mixture-of-experts keys Mixtral, Qwen3-MoE and Qwen3-Next share (num_experts_per_tok,
// router_aux_loss_coef; Qwen's sparse-layer rule) and the checks every MoE configuration gets.
#include <algorithm>

#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

std::vector<bool> read_sparse_layers(const Json& j, const std::string& where, std::int64_t layers) {
  const std::int64_t step = json_int(j, "decoder_sparse_step", where).value_or(1);
  if (step < 1) throw ConfigError(where + ": \"decoder_sparse_step\" must be >= 1, found " + std::to_string(step));
  std::vector<bool> sparse(static_cast<std::size_t>(layers), false);
  for (std::int64_t i = 0; i < layers; ++i) sparse[static_cast<std::size_t>(i)] = (i + 1) % step == 0;
  const auto it = j.find("mlp_only_layers");
  if (it == j.end() || it->is_null()) return sparse;
  if (!it->is_array()) throw ConfigError(where + ": \"mlp_only_layers\" must be a list of layer indices, found " + it->dump());
  for (const Json& layer : *it) {
    if (!layer.is_number_integer() || layer.get<std::int64_t>() < 0 || layer.get<std::int64_t>() >= layers) {
      throw ConfigError(where + ": \"mlp_only_layers\" entries must be layer indices 0.." + std::to_string(layers - 1) +
                        ", found " + layer.dump());
    }
    sparse[static_cast<std::size_t>(layer.get<std::int64_t>())] = false;
  }
  return sparse;
}

void parse_moe_keys(const Json& j, const std::string& where, const char* experts_key, std::int64_t default_experts,
                    std::int64_t default_top_k, ModelConfig& c) {
  MoeArchitecture& m = c.arch.moe;
  m.experts = json_int(j, experts_key, where).value_or(default_experts);
  m.top_k = json_int(j, "num_experts_per_tok", where).value_or(default_top_k);
  // Released models have 8 to 512 experts a layer (Mixtral 8, Qwen3-MoE 128, Kimi K2 384,
  // Qwen3-Next 512); twice the largest is room for the next, and a count past it a corrupt or
  // hostile file, refused before a module is built for each (the count over all layers is
  // bounded too: model/config.cpp).
  constexpr std::int64_t kMaxExperts = 1024;
  if (m.experts < 0 || m.experts > kMaxExperts) {
    throw ConfigError(where + ": \"" + experts_key + "\" must be between 0 and " + std::to_string(kMaxExperts) + ", found " +
                      std::to_string(m.experts));
  }
  if (m.experts > 0 && (m.top_k < 1 || m.top_k > m.experts)) {
    throw ConfigError(where + ": \"num_experts_per_tok\" must be between 1 and " + experts_key + " (" +
                      std::to_string(m.experts) + "), found " + std::to_string(m.top_k));
  }
  m.router_aux_loss_coef = json_number(j, "router_aux_loss_coef", where).value_or(0.001);
  if (m.router_aux_loss_coef < 0) {
    throw ConfigError(where + ": \"router_aux_loss_coef\" must be >= 0, found " + std::to_string(m.router_aux_loss_coef));
  }
  // Multiplicative noise on the router's input in training (MixtralConfig's router_jitter_noise);
  // ctune does not implement it, and a run with it would not be the run the config describes.
  if (const auto jitter = json_number(j, "router_jitter_noise", where); jitter && *jitter != 0.0) {
    throw UnsupportedError(where + ": \"router_jitter_noise\" " + std::to_string(*jitter) +
                           " is not supported (expected 0: ctune routes without input noise)");
  }
  if (m.intermediate <= 0 && m.experts > 0) {
    throw ConfigError(where + ": the experts' intermediate size must be positive, found " + std::to_string(m.intermediate));
  }
  if (m.sparse_layers.empty()) m.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), m.experts > 0);
}

}  // namespace ctune::model::families
