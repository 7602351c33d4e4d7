// GGUF -> CausalLM. Every parameter the configuration implies must be present with the shape it
// implies; every tensor in the file must be used (rope_freqs.weight by the rotary frequencies,
// the longrope factors by the configuration).
#include "export/gguf_import.h"

#include <map>
#include <set>

#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.h"
#include "export/gguf_metadata.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "model/rope.h"
#include "model/weights.h"

namespace ctune::exporter {

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::int64_t qk_heads(const model::ModelConfig& c, char projection) {
  return projection == 'q' ? c.num_attention_heads : c.num_key_value_heads;
}

}  // namespace

model::CausalLM load_gguf_model(const io::GgufFile& file) {
  const std::string where = file.path().string();
  const io::GgufHeader& h = file.header();
  model::ModelConfig config = config_from_gguf(h, where);
  std::set<std::string> used;
  if (config.rope.type == "longrope") {
    const std::vector<std::int64_t> pairs{config.rope.rotary_dim(config.head_dim) / 2};
    for (auto [name, out] : {std::pair{kRopeFactorsLongName, &config.rope.long_factor},
                             std::pair{kRopeFactorsShortName, &config.rope.short_factor}}) {
      const io::GgufTensorInfo* info = h.find_tensor(name);
      if (!info || info->shape() != pairs)
        throw FormatError(where + ": " + name + " has shape " + (info ? shape_text(info->shape()) : "none") + " (expected " +
                          shape_text(pairs) + ")");
      const at::Tensor f = decode_tensor(file, *info).to(at::kDouble).contiguous();
      out->assign(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
      used.insert(name);
    }
  }
  const bool permuted = gguf_permutes_qk(config);
  model::CausalLM lm(config, at::kFloat);
  at::NoGradGuard no_grad;
  for (const GgufSource& source : gguf_sources(config, model::hf_state_dict(lm))) {
    const auto& [name, param] = source.parts.front();
    const io::GgufTensorInfo* info = h.find_tensor(source.gguf);
    if (!info) throw FormatError(where + ": missing tensor " + source.gguf + " (for " + name + ")");
    const std::vector<model::GgufChange> changes = gguf_changes(config, name);
    std::vector<std::int64_t> expected =
        apply_changes(at::empty(param.sizes(), param.options().device(at::kMeta)), changes).sizes().vec();
    if (source.stacked) expected.insert(expected.begin(), static_cast<std::int64_t>(source.parts.size()));
    if (info->shape() != expected)
      throw FormatError(where + ": tensor " + info->name + " has shape " + shape_text(info->shape()) + " (expected " +
                        shape_text(expected) + ")");
    at::Tensor value = decode_tensor(file, *info);
    if (const char p = qk_projection(name); p && permuted) value = unpermute_qk_rows(value, qk_heads(config, p));
    if (gguf_shifts_norm(config, name)) value = value - 1;
    value = undo_changes(value, changes);
    for (std::size_t e = 0; e < source.parts.size(); ++e)
      source.parts[e].second.copy_(source.stacked ? value[static_cast<std::int64_t>(e)] : value);
    used.insert(info->name);
  }
  if (const io::GgufTensorInfo* freqs = h.find_tensor(kRopeFreqsName)) {
    if (!permuted || freqs->shape() != std::vector<std::int64_t>{config.head_dim / 2})
      throw FormatError(where + ": rope_freqs.weight has shape " + shape_text(freqs->shape()) + " (expected [" +
                        std::to_string(config.head_dim / 2) + "] in a llama file)");
    lm->model->inv_freq = model::rope_inv_freq(config) / decode_tensor(file, *freqs);
    used.insert(freqs->name);
  }
  for (const auto& t : h.tensors)
    if (!used.count(t.name)) throw FormatError(where + ": unexpected tensor " + t.name);
  return lm;
}

std::size_t apply_gguf_lora(model::CausalLM& lm, const io::GgufFile& adapter) {
  const std::string where = adapter.path().string();
  const io::GgufHeader& h = adapter.header();
  const auto& config = lm->config();
  auto text = [&](const char* key) { return h.require(key, where).as_string(where + ": " + key); };
  if (text("general.type") != "adapter") throw FormatError(where + ": general.type is not \"adapter\"");
  if (text("adapter.type") != "lora") throw FormatError(where + ": adapter.type is not \"lora\"");
  const std::string arch = gguf_architecture(config);
  if (text("general.architecture") != arch)
    throw FormatError(where + ": adapter for architecture " + text("general.architecture") + ", model is " + arch);
  const double alpha = h.require("adapter.lora.alpha", where).as_float(where + ": adapter.lora.alpha");

  std::map<std::string, GgufSource> weights;  // GGUF weight name -> the parameters it stores
  for (GgufSource& s : gguf_sources(config, model::hf_state_dict(lm))) weights.emplace(s.gguf, std::move(s));
  at::NoGradGuard no_grad;
  std::size_t changed = 0;
  for (const auto& a_info : h.tensors) {
    const std::string suffix = ".lora_a";
    if (a_info.name.size() <= suffix.size() || a_info.name.compare(a_info.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      if (a_info.name.size() > 7 && a_info.name.compare(a_info.name.size() - 7, 7, ".lora_b") == 0) continue;
      throw FormatError(where + ": unexpected tensor " + a_info.name + " (expected <name>.lora_a / .lora_b)");
    }
    const std::string base = a_info.name.substr(0, a_info.name.size() - suffix.size());
    const io::GgufTensorInfo* b_info = h.find_tensor(base + ".lora_b");
    if (!b_info) throw FormatError(where + ": " + a_info.name + " has no " + base + ".lora_b");
    const auto weight = weights.find(base);
    if (weight == weights.end()) throw FormatError(where + ": " + base + " is not a weight of this model");
    const GgufSource& target = weight->second;
    at::Tensor a = decode_tensor(adapter, a_info);   // [r, in], or [experts, r, in]
    at::Tensor b = decode_tensor(adapter, *b_info);  // [out, r], or [experts, out, r]
    if (!target.stacked) {
      a = a.unsqueeze(0);
      b = b.unsqueeze(0);
    }
    const at::Tensor& w = target.parts.front().second;
    const auto experts = static_cast<std::int64_t>(target.parts.size());
    if (a.dim() != 3 || b.dim() != 3 || a.size(0) != experts || b.size(0) != experts || a.size(2) != w.size(1) ||
        b.size(1) != w.size(0) || a.size(1) != b.size(2))
      throw FormatError(where + ": " + base + ": lora_a " + shape_text(a_info.shape()) + " and lora_b " +
                        shape_text(b_info->shape()) + " do not fit the weight " + shape_text(w.sizes().vec()) +
                        (target.stacked ? " of each of " + std::to_string(experts) + " experts" : std::string()));
    const std::string& hf = target.parts.front().first;
    if (const char p = qk_projection(hf); p && gguf_permutes_qk(config)) b = unpermute_qk_rows(b[0], qk_heads(config, p)).unsqueeze(0);
    if (const LoraChanges changes = lora_changes(gguf_changes(config, hf), hf); !target.stacked) {
      a = undo_changes(a[0], changes.a).unsqueeze(0);
      b = undo_changes(b[0], changes.b).unsqueeze(0);
    }
    const double scale = alpha != 0 ? alpha / static_cast<double>(a.size(1)) : 1.0;
    for (std::int64_t e = 0; e < experts; ++e) {
      at::Tensor part = target.parts[static_cast<std::size_t>(e)].second;
      part.copy_((part.to(at::kFloat) + scale * at::matmul(b[e], a[e])).to(part.scalar_type()));
    }
    ++changed;
  }
  return changed;
}

}  // namespace ctune::exporter
