// Name mapping tables. The per-layer part is the family's list of (HF module suffix, GGUF
// short name) pairs (model/family.h); everything else is one of three global tensors.
#include "export/gguf_names.h"

#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "export/gguf_tensors.h"
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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  const model::GgufForm& form = family_of(config).gguf;
  if (!form.norm_plus_one || !ends_with(hf_name, "norm.weight")) return false;
  const auto layer = split_layer(hf_name, "model.layers.");
  for (const std::string& plain : form.plain_norms)
    if (layer && layer->second == plain + ".weight") return false;
  return true;
}

std::vector<model::GgufChange> gguf_changes(const model::ModelConfig& config, const std::string& hf_name) {
  const model::GgufForm& form = family_of(config).gguf;
  const auto layer = split_layer(hf_name, "model.layers.");
  std::vector<model::GgufChange> out;
  if (!form.changes || !layer) return out;
  for (model::GgufChange& change : form.changes(config))
    if (change.param == layer->second) out.push_back(std::move(change));
  return out;
}

io::GgmlType gguf_storage_type(const model::ModelConfig& config, const std::string& hf_name, const at::Tensor& tensor,
                               io::GgmlType requested) {
  const auto layer = split_layer(hf_name, "model.layers.");
  for (const std::string& param : family_of(config).gguf.f32_parameters)
    if (layer && layer->second == param) return io::GgmlType::F32;
  return storage_type(tensor, requested);
}

std::optional<std::string> gguf_tensor_name(const model::ModelConfig& config, const std::string& hf_name) {
  for (const auto& [hf, gguf] : global_names())
    if (hf == hf_name) return gguf;
  auto layer = split_layer(hf_name, "model.layers.");
  if (!layer) return std::nullopt;
  for (const auto& [hf, gguf] : family_of(config).gguf.layer_parameters)
    if (hf == layer->second) return "blk." + layer->first + "." + gguf;
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
  for (const auto& [hf, gguf] : family_of(config).gguf.layer_parameters)
    if (gguf == layer->second) return "model.layers." + layer->first + "." + hf;
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
