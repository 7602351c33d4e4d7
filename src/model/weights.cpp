#include "model/weights.h"

#include <ATen/core/grad_mode.h>
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

void check_weights(CausalLM& model, const io::CheckpointReader& checkpoint) {
  std::vector<std::string> missing, unexpected, misshapen;
  std::set<std::string> used;
  const ModelConfig& config = model->config();
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (is_adapter_parameter(name)) continue;
    const io::TensorRef* ref = find_tensor(checkpoint, config, name);
    if (!ref) {
      missing.push_back(name);
      continue;
    }
    used.insert(ref->info->name);
    if (ref->info->shape != item.value().sizes().vec()) {
      misshapen.push_back(name + " in " + ref->file->path().filename().string() + " (expected " +
                          shape_text(item.value().sizes()) + ", found " + shape_text(ref->info->shape) + ")");
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
    spdlog::info("{}: {} tensors of the {} checkpoint are not its text model (vision tower, projector) and are not "
                 "loaded; ctune trains and writes the text model",
                 checkpoint.dir().string(), foreign, config.wrapper_type);
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
  std::vector<const io::TensorRef*> refs;
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    if (is_adapter_parameter(item.key())) continue;
    params.push_back(item.value());
    refs.push_back(find_tensor(checkpoint, model->config(), item.key()));
  }
  Stage stage("loading " + checkpoint.dir().string(), static_cast<std::int64_t>(params.size()), "tensors");
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].set_data(io::load_tensor(*refs[i]->file, *refs[i]->info, params[i].scalar_type()));
    stage.advance(1, static_cast<std::uint64_t>(params[i].nbytes()));
  }
  stage.finish();
}

CausalLM load_causal_lm(const fs::path& dir, at::ScalarType dtype) {
  ModelConfig config = load_model_config(dir);
  io::CheckpointReader checkpoint(dir);  // validates every file before anything is allocated
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

void write_model_config(const ModelConfig& config, at::ScalarType dtype, const fs::path& dir) {
  io::write_file_atomic(dir / "config.json", config_to_json(config, dtype_to_hf(dtype)).dump(2) + "\n");
}

void write_model_tensors(const std::vector<std::pair<std::string, at::Tensor>>& state, const fs::path& dir,
                         std::uint64_t max_shard_bytes) {
  std::vector<at::Tensor> keep_alive;
  io::write_checkpoint_tensors(dir, io::describe_tensors(state, &keep_alive), max_shard_bytes);
}

void write_causal_lm_files(CausalLM& model, const fs::path& dir, std::uint64_t max_shard_bytes) {
  const auto state = hf_state_dict(model);
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
    const bool bias = ends_with(name, ".bias");
    if (norm) {
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
