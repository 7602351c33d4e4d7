#include "model/weights.h"

#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "io/file.h"
#include "io/tensor_io.h"
#include "model/family.h"
#include "ops/memory.h"
#include "quant/mxfp4.h"

namespace ctune::model {
namespace fs = std::filesystem;

namespace {
std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Non-persistent buffers some writers still include (old HF Llama checkpoints).
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool ignorable(const std::string& name) { return ends_with(name, "rotary_emb.inv_freq"); }

bool is_mxfp4_blocks(const std::string& name) { return ends_with(name, "_proj_blocks"); }
bool is_mxfp4_scales(const std::string& name) { return ends_with(name, "_proj_scales"); }

// Adapter parameters (LoRA's lora_A/lora_B) live beside the base weights in the module tree
// but belong to adapter files, not to the model's checkpoint.
bool is_adapter_parameter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

const Wrapper* wrapper_of(const ModelConfig& config) {
  return config.wrapper_type.empty() ? nullptr : &*family_for_model_type(config.wrapper_type, "model_type").wrapper;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The checkpoint tensor holding the model's parameter `name`: the same name, or inside a
// multimodal wrapper where its Family::wrapper says.
const io::TensorRef* find_tensor(const io::CheckpointReader& checkpoint, const ModelConfig& config, const std::string& name) {
  const Wrapper* w = wrapper_of(config);
  if (!w) return checkpoint.find(name);
  if (name == "lm_head.weight") {
    for (const auto& head : w->head_names)
      if (const auto* ref = checkpoint.find(head)) return ref;
    return nullptr;
  }
  if (!starts_with(name, "model.")) return nullptr;
  for (const auto& prefix : w->model_prefixes)
    if (const auto* ref = checkpoint.find(prefix + name.substr(6))) return ref;
  return nullptr;
}

// A parameter of a sparse layer's expert or router, split into the pieces a stacked checkpoint
// names: "model.layers.3.mlp.experts.5.up_proj.weight" -> layer "model.layers.3.", module "mlp",
// expert 5, projection "up_proj". expert < 0 for the router ("...mlp.gate.weight").
struct ExpertParam {
  std::string layer, module, projection;
  std::int64_t layer_index = 0;
  std::int64_t expert = -1;
};

std::optional<ExpertParam> expert_param(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (!starts_with(name, prefix)) return std::nullopt;
  const auto layer_end = name.find('.', prefix.size());
  if (layer_end == std::string::npos) return std::nullopt;
  ExpertParam p;
  p.layer = name.substr(0, layer_end + 1);
  p.layer_index = std::stoll(name.substr(prefix.size(), layer_end - prefix.size()));
  const auto module_end = name.find('.', layer_end + 1);
  if (module_end == std::string::npos) return std::nullopt;
  p.module = name.substr(layer_end + 1, module_end - layer_end - 1);
  const std::string rest = name.substr(module_end + 1);
  if (rest == "gate.weight") return p;
  if (!starts_with(rest, "experts.")) return std::nullopt;
  const auto index_end = rest.find('.', 8);
  if (index_end == std::string::npos || !ends_with(rest, ".weight")) return std::nullopt;
  p.expert = std::stoll(rest.substr(8, index_end - 8));
  p.projection = rest.substr(index_end + 1, rest.size() - index_end - 1 - 7);
  return p;
}

// An expert's projection by the family's names (the model's parameter names are the family's).
bool is_gate(const ModelConfig& config, const std::string& projection) { return projection == config.arch.names.expert_gate; }
bool is_up(const ModelConfig& config, const std::string& projection) { return projection == config.arch.names.expert_up; }

// A parameter stored inside a layer's fused checkpoint tensor (Family::fused_tensors).
struct FusedSource {
  std::string layer;   // "model.layers.3."
  std::string tensor;  // the checkpoint tensor's full name
  const FusedTensor* spec = nullptr;
  std::vector<std::size_t> pieces;  // the spec's pieces that make this parameter, in order
};

// The family's fused tensors for this config, and which parameters they hold.
class FusedLayout {
 public:
  explicit FusedLayout(const ModelConfig& config) {
    const Family& family = family_for_model_type(config.model_type, "model_type");
    if (family.fused_tensors) specs_ = family.fused_tensors(config);
  }
  bool empty() const { return specs_.empty(); }

  std::optional<FusedSource> of(const std::string& param) const {
    const auto layer = layer_prefix(param);
    if (!layer) return std::nullopt;
    const std::string rest = param.substr(layer->size());
    for (const FusedTensor& spec : specs_) {
      FusedSource s{*layer, *layer + spec.name, &spec, {}};
      for (std::size_t i = 0; i < spec.pieces.size(); ++i)
        if (spec.pieces[i].param == rest) s.pieces.push_back(i);
      if (!s.pieces.empty()) return s;
    }
    return std::nullopt;
  }
  // Whether a checkpoint tensor is one of the fused ones (read, then copied apart).
  bool holds(const std::string& tensor) const {
    for (const FusedTensor& spec : specs_)
      if (ends_with(tensor, "." + spec.name)) return true;
    return false;
  }

 private:
  static std::optional<std::string> layer_prefix(const std::string& name) {
    static const std::string prefix = "model.layers.";
    if (!starts_with(name, prefix)) return std::nullopt;
    const auto end = name.find('.', prefix.size());
    if (end == std::string::npos) return std::nullopt;
    return name.substr(0, end + 1);
  }
  std::vector<FusedTensor> specs_;
};

std::int64_t group_rows(const FusedTensor& f) {
  std::int64_t rows = 0;
  for (const auto& piece : f.pieces) rows += piece.rows;
  return rows;
}

// The fused tensor's shape for a parameter of `sizes` inside it: [groups * Σ rows, sizes[1:]...].
std::vector<std::int64_t> fused_shape(const FusedTensor& f, at::IntArrayRef sizes) {
  std::vector<std::int64_t> shape = sizes.vec();
  shape[0] = f.groups * group_rows(f);
  return shape;
}

// The parameter's rows gathered out of its fused tensor (a new tensor).
at::Tensor gather_fused(const at::Tensor& fused, const FusedSource& s) {
  const FusedTensor& f = *s.spec;
  std::vector<std::int64_t> grouped = fused.sizes().vec();
  grouped[0] = group_rows(f);
  grouped.insert(grouped.begin(), f.groups);
  const at::Tensor view = fused.reshape(grouped);
  std::vector<at::Tensor> parts;
  for (const std::size_t i : s.pieces) {
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < i; ++j) offset += f.pieces[j].rows;
    std::vector<std::int64_t> flat = fused.sizes().vec();
    flat[0] = f.groups * f.pieces[i].rows;
    parts.push_back(view.narrow(1, offset, f.pieces[i].rows).reshape(flat));
  }
  return at::cat(parts).contiguous();
}

// The fused tensor of `layer` from its parameters' values (`params`: full name -> tensor): each
// piece's rows of every group, interleaved back group by group.
at::Tensor fuse(const std::string& layer, const FusedTensor& f, const std::map<std::string, at::Tensor>& params) {
  std::map<std::string, std::int64_t> taken;  // rows of each parameter already placed
  std::vector<at::Tensor> parts;
  std::vector<std::int64_t> flat;
  for (const auto& piece : f.pieces) {
    const at::Tensor& t = params.at(layer + piece.param);
    std::vector<std::int64_t> grouped = t.sizes().vec();
    grouped[0] = piece.rows;
    grouped.insert(grouped.begin(), f.groups);
    std::int64_t& start = taken[piece.param];
    parts.push_back(t.narrow(0, start, f.groups * piece.rows).reshape(grouped));
    start += f.groups * piece.rows;
    flat = fused_shape(f, t.sizes());
  }
  return at::cat(parts, 1).reshape(flat);
}

// Where a parameter's values are in the checkpoint: a tensor, rows of one expert's matrix in a
// stacked tensor (gate: rows [0, I) of gate_up_proj[e], up: rows [I, 2 I), down: down_proj[e]),
// or rows gathered out of a fused tensor.
struct Source {
  const io::TensorRef* ref = nullptr;
  std::string name;  // the checkpoint tensor's
  // MXFP4 (quant/mxfp4.h): `ref` is the parameter's _blocks tensor, this its _scales; `param`
  // the parameter's own name, for messages.
  const io::TensorRef* scales = nullptr;
  bool mxfp4 = false;
  std::string param;
  std::int64_t expert = -1;
  std::int64_t row0 = 0;
  std::vector<std::int64_t> expected;  // the checkpoint tensor's shape this parameter implies
  std::optional<FusedSource> fused;
};

// A stacked parameter [E, A, B] absent from the checkpoint but stored as MXFP4, as gpt-oss's
// released experts are: name_blocks [E, B, A / 32, 16] and name_scales [E, B, A / 32].
void find_mxfp4(const io::CheckpointReader& checkpoint, const ModelConfig& config, const std::string& name, at::IntArrayRef sizes,
                Source& src) {
  const auto* blocks = find_tensor(checkpoint, config, name + "_blocks");
  const auto* scales = find_tensor(checkpoint, config, name + "_scales");
  if ((!blocks && !scales) || sizes.size() != 3) return;
  src.mxfp4 = true;
  src.param = name;
  src.name = name + "_blocks";
  src.ref = blocks;
  src.scales = scales;
  src.expected = {sizes[0], sizes[2], sizes[1] / 32, 16};
}

// What check_weights reports of an MXFP4 source beyond its blocks' shape: missing scales, scales
// that do not fit the blocks, a width MXFP4's 32-value runs cannot hold.
void check_mxfp4(const Source& src, at::IntArrayRef sizes, std::set<std::string>& used, std::vector<std::string>& missing,
                 std::vector<std::string>& misshapen) {
  if (sizes[1] % 32 != 0)
    misshapen.push_back(src.name + " (MXFP4 holds runs of 32 values; " + src.param + " has " + std::to_string(sizes[1]) + " rows)");
  if (!src.scales) {
    missing.push_back(src.param + "_scales");
    return;
  }
  used.insert(src.scales->info->name);
  const std::vector<std::int64_t> expected(src.expected.begin(), src.expected.end() - 1);
  if (src.scales->info->shape != expected) {
    misshapen.push_back(src.param + "_scales in " + src.scales->file->path().filename().string() + " (expected " +
                        shape_text(expected) + " to match its blocks, found " + shape_text(src.scales->info->shape) + ")");
  }
}

Source find_source(const io::CheckpointReader& checkpoint, const ModelConfig& config, const std::string& stacked,
                   const FusedLayout& fused, const std::string& name, at::IntArrayRef sizes) {
  Source src;
  if (auto f = fused.of(name)) {
    src.name = f->tensor;
    src.expected = fused_shape(*f->spec, sizes);
    src.fused = std::move(f);
    src.ref = find_tensor(checkpoint, config, src.name);
    return src;
  }
  const auto expert = stacked.empty() ? std::nullopt : expert_param(name);
  if (!expert) {
    src.ref = find_tensor(checkpoint, config, name);
    src.name = name;
    src.expected = sizes.vec();
    if (!src.ref) find_mxfp4(checkpoint, config, name, sizes, src);
    return src;
  }
  const std::string base = expert->layer + stacked + ".";
  if (expert->expert < 0) {
    src.name = base + "gate.weight";
    src.expected = sizes.vec();
  } else if (is_gate(config, expert->projection) || is_up(config, expert->projection)) {
    src.name = base + "experts.gate_up_proj";
    src.expected = {config.arch.moe.experts, 2 * sizes[0], sizes[1]};
    src.row0 = is_up(config, expert->projection) ? sizes[0] : 0;
  } else {
    src.name = base + "experts.down_proj";
    src.expected = {config.arch.moe.experts, sizes[0], sizes[1]};
  }
  src.expert = expert->expert;
  src.ref = find_tensor(checkpoint, config, src.name);  // under a wrapper's prefix too
  return src;
}

// A wrapper's head module prefixes ("lm_head.", "language_model.lm_head."), from its head_names.
std::vector<std::string> head_prefixes(const Wrapper& w) {
  std::vector<std::string> out;
  for (const auto& head : w.head_names) out.push_back(head.substr(0, head.size() - std::string("weight").size()));
  return out;
}

// Tensors of the checkpoint that are not the model's and are ignored by design: a tied head's
// duplicate, a wrapper's vision tower.
bool ignored_tensor(const ModelConfig& config, const std::string& name) {
  if (config.tie_word_embeddings && name == "lm_head.weight") return true;  // HF ignores it too
  for (const auto& prefix : family_for_model_type(config.model_type, "model_type").ignored_prefixes)
    if (starts_with(name, prefix)) return true;
  if (const Wrapper* w = wrapper_of(config)) {
    for (const auto& head : w->head_names)
      if (config.tie_word_embeddings && name == head) return true;
    for (const auto& prefix : w->ignored_prefixes)
      if (starts_with(name, prefix)) return true;
  }
  return false;
}

std::string summarise(const std::vector<std::string>& items, std::size_t limit = 4) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > limit) s += ", ... (" + std::to_string(items.size() - limit) + " more)";
  return s;
}
}  // namespace

std::string checkpoint_module_name(const ModelConfig& config, const std::string& name) {
  const Wrapper* w = wrapper_of(config);
  if (!w) return name;
  if (starts_with(name, "lm_head.")) return head_prefixes(*w).front() + name.substr(8);
  if (starts_with(name, "model.")) return w->model_prefixes.front() + name.substr(6);
  return name;
}

std::string model_module_name(const ModelConfig& config, const std::string& checkpoint_name) {
  const Wrapper* w = wrapper_of(config);
  if (!w) return checkpoint_name;
  for (const auto& prefix : head_prefixes(*w))
    if (starts_with(checkpoint_name, prefix)) return "lm_head." + checkpoint_name.substr(prefix.size());
  for (const auto& prefix : w->model_prefixes)
    if (starts_with(checkpoint_name, prefix)) return "model." + checkpoint_name.substr(prefix.size());
  return checkpoint_name;
}

std::string stacked_experts_module(const ModelConfig& config, const io::CheckpointReader& checkpoint) {
  // gpt-oss's experts are stacked in the model itself (model/stacked_experts.h): plain tensors.
  if (config.arch.moe.experts == 0 || config.arch.moe.clamped_stacked_experts) return "";
  // transformers v5 stacks the experts under the layer's MLP module (Mixtral's too: `mlp`); a
  // checkpoint may also stack them under the family's sparse block (block_sparse_moe).
  const ModuleNames& names = config.arch.names;
  for (const auto& [name, ref] : checkpoint.tensors()) {
    (void)ref;
    for (const std::string& module : {names.mlp, names.sparse_mlp})
      if (ends_with(name, "." + module + ".experts.gate_up_proj")) return module;
  }
  return "";
}

std::vector<std::string> fused_modules(const ModelConfig& config) {
  std::vector<std::string> out;
  const Family& family = family_for_model_type(config.model_type, "model_type");
  if (!family.fused_tensors) return out;
  for (const FusedTensor& f : family.fused_tensors(config)) {
    for (const auto& piece : f.pieces) {
      std::string module = piece.param.substr(0, piece.param.rfind('.'));  // drop ".weight"
      module = module.substr(module.rfind('.') + 1);
      if (std::find(out.begin(), out.end(), module) == out.end()) out.push_back(module);
    }
  }
  return out;
}

void check_weights(CausalLM& model, const io::CheckpointReader& checkpoint) {
  std::vector<std::string> missing, unexpected, misshapen;
  std::set<std::string> used;
  const ModelConfig& config = model->config();
  std::set<std::string> misshapen_seen;
  const std::string stacked = stacked_experts_module(config, checkpoint);
  const FusedLayout fused(config);
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (is_adapter_parameter(name)) continue;
    const Source src = find_source(checkpoint, config, stacked, fused, name, item.value().sizes());
    if (!src.ref) {
      // A stacked or fused tensor is reported once, whatever number of parameters it holds.
      if (used.insert(src.name).second || (src.expert < 0 && !src.fused)) missing.push_back(src.name);
      continue;
    }
    used.insert(src.ref->info->name);
    if (src.mxfp4) check_mxfp4(src, item.value().sizes(), used, missing, misshapen);
    if (src.ref->info->shape != src.expected && misshapen_seen.insert(src.name).second) {
      misshapen.push_back(src.name + " in " + src.ref->file->path().filename().string() + " (expected " +
                          shape_text(src.expected) + ", found " + shape_text(src.ref->info->shape) + ")");
    }
  }
  std::size_t foreign = 0;
  for (const auto& [name, ref] : checkpoint.tensors()) {
    if (used.count(name) || ignorable(name)) continue;
    if (ignored_tensor(config, name)) {
      if (name.find("lm_head") == std::string::npos) ++foreign;
      continue;
    }
    unexpected.push_back(name + " in " + ref.file->path().filename().string());
  }
  if (foreign > 0) {
    spdlog::info("{}: {} tensors of the {} checkpoint are not its causal language model (vision tower, projector, "
                 "multi-token prediction) and are not loaded; ctune trains and writes the language model",
                 checkpoint.dir().string(), foreign, config.wrapper_type.empty() ? config.model_type : config.wrapper_type);
  }
  if (missing.empty() && unexpected.empty() && misshapen.empty()) return;
  std::string msg = checkpoint.dir().string() + ": checkpoint does not match config.json:";
  if (!missing.empty()) msg += " " + std::to_string(missing.size()) + " missing (" + summarise(missing) + ")";
  if (!misshapen.empty()) msg += " " + std::to_string(misshapen.size()) + " wrongly shaped (" + summarise(misshapen) + ")";
  if (!unexpected.empty()) msg += " " + std::to_string(unexpected.size()) + " unexpected (" + summarise(unexpected) + ")";
  throw ShapeError(msg);
}

void load_weights(CausalLM& model, const io::CheckpointReader& checkpoint) {
  check_weights(model, checkpoint);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params;
  std::vector<Source> sources;
  const std::string stacked = stacked_experts_module(model->config(), checkpoint);
  const FusedLayout fused(model->config());
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    if (is_adapter_parameter(item.key())) continue;
    params.push_back(item.value());
    sources.push_back(find_source(checkpoint, model->config(), stacked, fused, item.key(), item.value().sizes()));
  }
  Stage stage("loading " + checkpoint.dir().string(), static_cast<std::int64_t>(params.size()), "tensors");
  // A stacked or fused tensor is read once; each expert's parameter is a view of its rows, each
  // fused parameter a copy of its rows.
  std::map<std::string, at::Tensor> read_shared;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Source& src = sources[i];
    if (src.mxfp4) {
      params[i].set_data(quant::dequantize_mxfp4(io::load_tensor(*src.ref->file, *src.ref->info, at::kByte),
                                                 io::load_tensor(*src.scales->file, *src.scales->info, at::kByte),
                                                 params[i].scalar_type(), src.param));
      stage.advance(1, static_cast<std::uint64_t>(params[i].nbytes()));
      continue;
    }
    if (src.expert < 0 && !src.fused) {
      params[i].set_data(io::load_tensor(*src.ref->file, *src.ref->info, params[i].scalar_type()));
      stage.advance(1, static_cast<std::uint64_t>(params[i].nbytes()));
      continue;
    }
    auto it = read_shared.find(src.name);
    if (it == read_shared.end())
      it = read_shared.emplace(src.name, io::load_tensor(*src.ref->file, *src.ref->info, params[i].scalar_type())).first;
    if (src.fused) {
      params[i].set_data(gather_fused(it->second, *src.fused));
    } else {
      params[i].set_data(it->second[src.expert].narrow(0, src.row0, params[i].size(0)));
    }
    stage.advance(1, static_cast<std::uint64_t>(params[i].nbytes()));
  }
  stage.finish();
}

LoadFootprint load_footprint(const ModelConfig& config, const io::CheckpointReader& checkpoint, at::ScalarType dtype) {
  LoadFootprint f;
  const auto element = static_cast<std::int64_t>(c10::elementSize(dtype));
  const FusedLayout fused(config);
  for (const auto& [name, ref] : checkpoint.tensors()) {
    if (ignorable(name) || ignored_tensor(config, name)) continue;  // not the model's: never read
    if (is_mxfp4_scales(name)) continue;  // read with its blocks, into their tensor
    // MXFP4 blocks hold two values a byte, dequantised into new memory (quant/mxfp4.h).
    const bool mxfp4 = is_mxfp4_blocks(name);
    const auto bytes = static_cast<std::int64_t>(ref.info->numel()) * element * (mxfp4 ? 2 : 1);
    f.reserved += bytes;
    f.largest = std::max(f.largest, bytes);
    ++f.tensors;
    if (mxfp4 || !io::borrows(*ref.file, *ref.info, dtype) || fused.holds(name)) {  // a fused tensor's rows are copied apart
      f.converted += bytes;
      ++f.converted_tensors;
      f.stored = mxfp4 ? "MXFP4" : dtype_to_hf(io::to_scalar_type(ref.info->dtype, ref.file->path().string()));
    }
  }
  return f;
}

std::string describe_conversion(const LoadFootprint& f, at::ScalarType dtype) {
  std::string s = "its " + std::to_string(f.tensors) + " tensors, " + format_bytes(f.reserved) + " in " +
                  dtype_to_hf(dtype) + ", reserved as the model is built, then ";
  if (f.converted_tensors == 0) return s + "read in place from the mapped files";
  return s + std::to_string(f.converted_tensors) + " converted from " + f.stored + " into new memory, the largest (" +
         format_bytes(f.largest) +
         ") beside its reservation; in the dtype they are stored in they would be read in place";
}

CausalLM load_causal_lm(const fs::path& dir, at::ScalarType dtype) {
  ModelConfig config = load_model_config(dir);
  io::CheckpointReader checkpoint(dir);  // validates every file before anything is allocated
  config.stacked_experts = stacked_experts_module(config, checkpoint);
  // The model reserves every parameter when built, and each conversion allocates its tensor
  // before the reserved one is dropped.
  const LoadFootprint need = load_footprint(config, checkpoint, dtype);
  const std::int64_t address = need.reserved + (need.converted_tensors ? need.largest : 0);
  ops::require_host_memory("loading " + dir.string() + " in " + dtype_to_hf(dtype), {need.converted, address},
                           describe_conversion(need, dtype));
  CausalLM model(std::move(config), dtype);
  load_weights(model, checkpoint);
  model->eval();
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> hf_state_dict(CausalLM& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& item : model->named_parameters(true)) {
    if (!is_adapter_parameter(item.key())) out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> fuse_parameters(const ModelConfig& config,
                                                                 std::vector<std::pair<std::string, at::Tensor>> state) {
  const FusedLayout layout(config);
  if (layout.empty()) return state;
  std::map<std::string, at::Tensor> parts;
  for (const auto& [name, t] : state)
    if (layout.of(name)) parts.emplace(name, t);
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::set<std::string> written;
  for (auto& [name, t] : state) {
    const auto fused = layout.of(name);
    if (!fused) {
      out.emplace_back(name, t);
    } else if (written.insert(fused->tensor).second) {
      out.emplace_back(fused->tensor, fuse(fused->layer, *fused->spec, parts));
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> checkpoint_state_dict(CausalLM& model) {
  const ModelConfig& config = model->config();
  auto state = fuse_parameters(config, hf_state_dict(model));
  if (config.stacked_experts.empty()) return state;
  // Per sparse layer: the router renamed under the stacked module, the experts' tensors
  // replaced (where the first expert's gate was) by the two stacked ones.
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::map<std::string, std::vector<at::Tensor>> gate_up, down;
  for (auto& [name, t] : state) {
    const auto expert = expert_param(name);
    if (!expert || !config.arch.moe.sparse(expert->layer_index)) {
      out.emplace_back(name, t);
      continue;
    }
    const std::string base = expert->layer + config.stacked_experts + ".";
    if (expert->expert < 0) {
      out.emplace_back(base + "gate.weight", t);
    } else if (is_gate(config, expert->projection)) {
      gate_up[base].push_back(t);
      if (expert->expert == 0) out.emplace_back(base + "experts.gate_up_proj", at::Tensor());
    } else if (is_up(config, expert->projection)) {
      gate_up[base].back() = at::cat({gate_up[base].back(), t});
    } else {
      down[base].push_back(t);
      if (expert->expert == 0) out.emplace_back(base + "experts.down_proj", at::Tensor());
    }
  }
  for (auto& [name, t] : out) {
    if (t.defined()) continue;
    const std::string base = name.substr(0, name.find("experts."));
    t = at::stack(ends_with(name, "gate_up_proj") ? gate_up[base] : down[base]);
  }
  return out;
}

void write_model_config(const ModelConfig& config, at::ScalarType dtype, const fs::path& dir) {
  io::write_file_atomic(dir / "config.json", config_to_json(config, dtype_to_hf(dtype)).dump(2) + "\n");
}

void write_model_tensors(const std::vector<std::pair<std::string, at::Tensor>>& state, const fs::path& dir,
                         std::uint64_t max_shard_bytes) {
  std::vector<at::Tensor> keep_alive;
  io::write_checkpoint_tensors(dir, io::describe_tensors(state, &keep_alive), max_shard_bytes);
}

void write_causal_lm_files(CausalLM& model, const fs::path& dir, std::uint64_t max_shard_bytes) {
  const auto state = checkpoint_state_dict(model);
  write_model_tensors(state, dir, max_shard_bytes);
  write_model_config(model->config(), state.empty() ? at::kFloat : state.front().second.scalar_type(), dir);
}

void save_causal_lm(CausalLM& model, const fs::path& dir, const SaveOptions& options,
                    const std::function<void(const fs::path&)>& write_extra) {
  io::StagingDir staging(dir, options.overwrite);
  write_causal_lm_files(model, staging.path(), options.max_shard_bytes);
  if (write_extra) write_extra(staging.path());
  staging.commit();
}

void init_weights(CausalLM& model, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double std = model->config().initializer_range;
  for (auto& item : model->named_parameters(true)) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    if (is_adapter_parameter(name)) continue;
    const bool norm = ends_with(name, "norm.weight");
    // gpt-oss's stacked experts' biases (experts.gate_up_proj_bias) start at 0 as every bias;
    // its router's bias is drawn as a weight (GptOssPreTrainedModel._init_weights).
    const bool bias = (ends_with(name, ".bias") || ends_with(name, "_bias")) && !ends_with(name, ".router.bias");
    if (ends_with(name, "linear_attn.norm.weight") || ends_with(name, ".dt_bias")) {
      p.fill_(1.0);  // the DeltaNet's gated norm scales by w, not 1 + w; dt_bias as transformers
    } else if (ends_with(name, ".A_log")) {
      // A = exp(A_log) uniform in [0.01, 16], as transformers initialises it: per-token decays
      // from about 0.99 (long memory) to about 1e-9 (none).
      auto a = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
      a.uniform_(0.01, 16.0, gen);
      p.copy_(a.log());
    } else if (norm) {
      p.fill_(model->config().arch.norm_offset ? 0.0 : 1.0);  // a (1 + w) norm starts at w = 0
    } else if (bias) {
      p.zero_();
    } else {
      // Sample in fp32 so the values do not depend on the storage dtype, then cast.
      auto values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
      values.normal_(0.0, std, gen);
      p.copy_(values);
    }
  }
}

}  // namespace ctune::model
