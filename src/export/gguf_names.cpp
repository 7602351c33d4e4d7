// Name mapping tables. The per-layer part is the family's list of (HF module suffix, GGUF
// short name) pairs (model/family.h); everything else is one of three global tensors.
#include "export/gguf_names.h"

#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/family.h"

namespace ctune::exporter {

namespace {

const model::Family& family_of(const model::ModelConfig& config) {
  return model::family_for_model_type(config.model_type, "model_type");
}

const std::vector<std::pair<std::string, std::string>>& layer_names(const model::ModelConfig& config) {
  return family_of(config).gguf.layer_tensors;
}

const std::vector<std::pair<std::string, std::string>>& global_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  return names;
}

// Splits "<prefix><digits>.<rest>" into (digits, rest).
std::optional<std::pair<std::string, std::string>> split_layer(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const auto dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
  const std::string index = name.substr(prefix.size(), dot - prefix.size());
  if (index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::make_pair(index, name.substr(dot + 1));
}

// "weight" / "bias" suffix of "<module>.<suffix>".
std::optional<std::pair<std::string, std::string>> split_param(const std::string& rest) {
  const auto dot = rest.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  std::string param = rest.substr(dot + 1);
  if (param != "weight" && param != "bias") return std::nullopt;
  return std::make_pair(rest.substr(0, dot), param);
}

}  // namespace

const model::GgufForm& gguf_form(const model::ModelConfig& config) {
  const model::Family& family = family_of(config);
  if (family.gguf.architecture.empty()) throw UnsupportedError("model_type \"" + config.model_type + "\" has no GGUF form");
  return family.gguf;
}

std::string gguf_architecture(const model::ModelConfig& config) { return gguf_form(config).architecture; }

bool gguf_permutes_qk(const model::ModelConfig& config) { return family_of(config).gguf.permuted_qk; }

bool gguf_shifts_norm(const model::ModelConfig& config, const std::string& hf_name) {
  static const std::string suffix = "norm.weight";
  return family_of(config).gguf.norm_plus_one && hf_name.size() >= suffix.size() &&
         hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<std::string> gguf_tensor_name(const model::ModelConfig& config, const std::string& hf_name) {
  for (const auto& [hf, gguf] : global_names())
    if (hf == hf_name) return gguf;
  auto layer = split_layer(hf_name, "model.layers.");
  if (!layer) return std::nullopt;
  auto param = split_param(layer->second);
  if (!param) return std::nullopt;
  for (const auto& [hf, gguf] : layer_names(config))
    if (hf == param->first) return "blk." + layer->first + "." + gguf + "." + param->second;
  return std::nullopt;
}

std::optional<std::string> hf_tensor_name(const model::ModelConfig& config, const std::string& gguf_name) {
  for (const auto& [hf, gguf] : global_names())
    if (gguf == gguf_name) return hf;
  auto layer = split_layer(gguf_name, "blk.");
  if (!layer) return std::nullopt;
  auto param = split_param(layer->second);
  if (!param) return std::nullopt;
  for (const auto& [hf, gguf] : layer_names(config))
    if (gguf == param->first) return "model.layers." + layer->first + "." + hf + "." + param->second;
  return std::nullopt;
}

std::optional<ExpertSlot> gguf_expert_slot(const model::ModelConfig& config, const std::string& hf_name) {
  const model::Family& family = family_of(config);
  if (!family.gguf.experts) return std::nullopt;
  auto layer = split_layer(hf_name, "model.layers.");
  if (!layer) return std::nullopt;
  // "<sparse block>.experts.<e>.<projection>.weight", by the family's names table
  auto expert = split_layer(layer->second, family.names.sparse_mlp + ".experts.");
  if (!expert) return std::nullopt;
  auto param = split_param(expert->second);
  if (!param || param->second != "weight") return std::nullopt;
  for (const auto& [hf, gguf] : model::gguf_expert_tensors(family.names))
    if (hf == param->first) return ExpertSlot{"blk." + layer->first + "." + gguf + ".weight", std::stoll(expert->first)};
  return std::nullopt;
}

at::Tensor GgufSource::value() const {
  if (!stacked) return parts.front().second;
  std::vector<at::Tensor> experts;
  for (const auto& part : parts) experts.push_back(part.second);
  return at::stack(experts);
}

std::vector<GgufSource> gguf_sources(const model::ModelConfig& config,
                                     const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::vector<GgufSource> out;
  std::map<std::string, std::size_t> stacks;  // GGUF name -> index in out
  for (const auto& [name, tensor] : named) {
    if (const auto slot = gguf_expert_slot(config, name)) {
      auto [it, fresh] = stacks.emplace(slot->gguf, out.size());
      if (fresh) {
        out.push_back({slot->gguf, {}, true});
        out.back().parts.resize(static_cast<std::size_t>(config.arch.moe.experts));
      }
      if (slot->expert < 0 || slot->expert >= config.arch.moe.experts)
        throw ShapeError(name + ": expert " + std::to_string(slot->expert) + " of " + std::to_string(config.arch.moe.experts));
      out[it->second].parts[static_cast<std::size_t>(slot->expert)] = {name, tensor};
      continue;
    }
    const auto gguf = gguf_tensor_name(config, name);
    if (!gguf) throw UnsupportedError(name + " has no GGUF tensor name");
    out.push_back({*gguf, {{name, tensor}}, false});
  }
  for (const GgufSource& s : out) {
    if (!s.stacked) continue;
    for (std::size_t e = 0; e < s.parts.size(); ++e) {
      const auto& [name, t] = s.parts[e];
      if (!t.defined()) throw ShapeError(s.gguf + ": expert " + std::to_string(e) + " has no tensor (every expert must have one)");
      if (t.sizes() != s.parts.front().second.sizes())
        throw ShapeError(s.gguf + ": " + name + " differs in shape from " + s.parts.front().first);
    }
  }
  return out;
}

char qk_projection(const std::string& hf_name) {
  if (hf_name.find(".self_attn.q_proj.") != std::string::npos) return 'q';
  if (hf_name.find(".self_attn.k_proj.") != std::string::npos) return 'k';
  return 0;
}

}  // namespace ctune::exporter
