#include "peft/adapter_io.h"

#include <ATen/core/grad_mode.h>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/weights.h"

namespace ctune::peft {
namespace fs = std::filesystem;

namespace {
const std::string kPrefix = "base_model.model.";
}

void write_adapter_tensors(const model::ModelConfig& base, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const fs::path& dir) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& [name, t] : tensors) named.emplace_back(kPrefix + model::checkpoint_module_name(base, name), t);
  if (named.empty()) throw ConfigError("save_adapter: the model has no LoRA adapters");
  std::vector<at::Tensor> keep;
  io::write_safetensors(dir / kAdapterWeights, io::describe_tensors(named, &keep));
}

void write_adapter_config(const LoraOptions& o, const fs::path& dir, const std::string& base) {
  nlohmann::ordered_json config = {{"peft_type", "LORA"},
                                   {"task_type", "CAUSAL_LM"},
                                   {"base_model_name_or_path", base},
                                   {"revision", nullptr},
                                   {"inference_mode", true},
                                   {"r", o.rank},
                                   {"lora_alpha", o.alpha},
                                   {"lora_dropout", o.dropout},
                                   {"target_modules", o.targets},
                                   {"fan_in_fan_out", false},
                                   {"bias", "none"},
                                   {"use_rslora", o.rslora},
                                   {"use_dora", false},
                                   {"modules_to_save", o.modules_to_save.empty() ? Json() : Json(o.modules_to_save)},
                                   {"init_lora_weights", true},
                                   {"layers_to_transform", nullptr},
                                   {"layers_pattern", nullptr},
                                   {"rank_pattern", Json::object()},
                                   {"alpha_pattern", Json::object()}};
  io::write_file_atomic(dir / kAdapterConfig, config.dump(2) + "\n");
}


std::vector<std::pair<std::string, at::Tensor>> adapter_state_dict(model::CausalLM& lm) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : lm->named_parameters(true)) {
    if (item.key().find(".lora_") != std::string::npos) tensors.emplace_back(item.key(), item.value());
  }
  // PEFT saves a module_to_save at the wrapped module's path, its adapter name dropped.
  for (auto& saved : adapter_saved_modules(lm)) tensors.push_back(std::move(saved));
  return tensors;
}

void write_adapter_files(model::CausalLM& lm, const LoraOptions& o, const fs::path& dir, const std::string& base) {
  write_adapter_tensors(lm->config(), adapter_state_dict(lm), dir);
  write_adapter_config(o, dir, base);
}

void save_adapter(model::CausalLM& lm, const LoraOptions& o, const fs::path& dir, const std::string& base, bool overwrite) {
  io::StagingDir staging(dir, overwrite);
  write_adapter_files(lm, o, staging.path(), base);
  staging.commit();
}

LoraOptions read_adapter_config(const fs::path& dir) {
  const fs::path path = dir / kAdapterConfig;
  const Json j = read_json_file(path);
  const std::string where = path.string();
  if (!j.is_object()) throw FormatError(where + ": expected a JSON object");
  const auto type = json_string(j, "peft_type", where).value_or("LORA");
  if (type != "LORA") throw UnsupportedError(where + ": peft_type \"" + type + "\" is not supported (expected LORA)");
  auto refuse_if = [&](bool bad, const std::string& what) {
    if (bad) throw UnsupportedError(where + ": " + what + " is not supported");
  };
  refuse_if(json_bool(j, "use_dora", where).value_or(false), "use_dora: true (DoRA)");
  refuse_if(json_bool(j, "fan_in_fan_out", where).value_or(false), "fan_in_fan_out: true");
  refuse_if(json_string(j, "bias", where).value_or("none") != "none", "bias other than \"none\"");
  refuse_if(j.contains("layers_to_transform") && !j["layers_to_transform"].is_null(), "layers_to_transform");
  refuse_if(j.contains("rank_pattern") && j["rank_pattern"].is_object() && !j["rank_pattern"].empty(), "rank_pattern");
  refuse_if(j.contains("alpha_pattern") && j["alpha_pattern"].is_object() && !j["alpha_pattern"].empty(), "alpha_pattern");

  LoraOptions o;
  o.rank = json_int(j, "r", where).value_or(8);
  o.alpha = json_number(j, "lora_alpha", where).value_or(8.0);
  o.dropout = json_number(j, "lora_dropout", where).value_or(0.0);
  o.rslora = json_bool(j, "use_rslora", where).value_or(false);
  if (o.rank <= 0) throw ConfigError(where + ": r must be positive, found " + std::to_string(o.rank));
  if (!std::isfinite(o.alpha)) throw ConfigError(where + ": lora_alpha must be a finite number, found " + std::to_string(o.alpha));
  if (!(o.dropout >= 0 && o.dropout < 1)) throw ConfigError(where + ": lora_dropout must be in [0, 1), found " + std::to_string(o.dropout));
  auto targets = j.find("target_modules");
  if (targets == j.end() || targets->is_null()) {
    o.targets = {"q_proj", "v_proj"};  // PEFT's default for llama and qwen2
  } else if (targets->is_string() && targets->get<std::string>() == "all-linear") {
    o.targets = {"all-linear"};  // expanded against the model (resolve_targets)
  } else if (targets->is_array()) {
    o.targets.clear();
    for (const auto& t : *targets) {
      if (!t.is_string()) throw FormatError(where + ": target_modules entries must be strings");
      o.targets.push_back(t.get<std::string>());
    }
  } else {
    throw UnsupportedError(where + ": target_modules as a regular expression is not supported (use a list of names)");
  }
  if (const auto saved = j.find("modules_to_save"); saved != j.end() && !saved->is_null()) {
    if (!saved->is_array()) throw FormatError(where + ": modules_to_save must be a list of module names, found " + saved->dump());
    for (const auto& m : *saved) {
      if (!m.is_string() || m.get<std::string>() != "gate")
        throw UnsupportedError(where + ": modules_to_save " + m.dump() +
                               " is not supported (expected \"gate\", the routers of a model with experts)");
    }
    if (!saved->empty()) o.modules_to_save = {"gate"};
  }
  return o;
}

LoraOptions load_adapter(model::CausalLM& lm, const fs::path& dir) {
  LoraOptions o = read_adapter_config(dir);
  std::error_code ec;
  const std::string hint = io::sharded_checkpoint_hint(dir);
  if (!hint.empty() && !fs::exists(dir / kAdapterWeights, ec)) throw IoError(dir.string() + ": no " + kAdapterWeights + hint);
  auto file = io::SafetensorsFile::open(dir / kAdapterWeights);
  // The config's r against the tensors before any adapter is allocated: "r": 1000000000 must
  // not reserve gigabytes to find out.
  for (const auto& info : file->header().tensors) {
    const bool a = info.name.find(".lora_A.") != std::string::npos, b = info.name.find(".lora_B.") != std::string::npos;
    if (!a && !b) continue;
    if (info.shape.size() != 2 || info.shape[a ? 0 : 1] != o.rank) {
      throw ShapeError(file->path().string() + ": tensor \"" + info.name + "\" has rank " +
                       (info.shape.size() == 2 ? std::to_string(info.shape[a ? 0 : 1]) : std::string("(not a matrix)")) + ", but " +
                       kAdapterConfig + " says r = " + std::to_string(o.rank));
    }
  }
  apply_lora(lm, o);
  // Tensor handles, not pointers: named_parameters() returns a temporary dict, and a handle
  // shares the parameter's storage, so copy_ below still writes into the model.
  std::map<std::string, at::Tensor> params;
  for (auto& [name, tensor] : adapter_state_dict(lm)) params[name] = tensor;
  std::set<std::string> loaded;
  at::NoGradGuard no_grad;
  for (const auto& info : file->header().tensors) {
    std::string name = info.name;
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(kPrefix.size());
    // PEFT may keep the adapter name in memory-style keys: "...lora_A.default.weight".
    auto pos = name.find(".default.weight");
    if (pos != std::string::npos) name = name.substr(0, pos) + ".weight";
    name = model::model_module_name(lm->config(), name);
    auto it = params.find(name);
    if (it == params.end()) {
      throw ShapeError(file->path().string() + ": tensor \"" + info.name + "\" matches no LoRA layer (or module to save) of the model");
    }
    if (info.shape != it->second.sizes().vec()) {
      auto text = [](const std::vector<std::int64_t>& shape) {
        std::string t = "[";
        for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
        return t + "]";
      };
      throw ShapeError(file->path().string() + ": tensor \"" + info.name + "\" has shape " + text(info.shape) +
                       ", the model needs " + text(it->second.sizes().vec()) + " (an adapter for another base model?)");
    }
    const at::Tensor value = io::load_tensor(*file, info, it->second.scalar_type());
    // PEFT loads such an adapter, and every output is then NaN: a greedy continuation of
    // token 0 repeated, with nothing to say why.
    if (value.is_floating_point() && !at::isfinite(value).all().item<bool>())
      throw FormatError(file->path().string() + ": tensor \"" + info.name + "\" holds non-finite values (NaN or inf)");
    it->second.copy_(value);
    loaded.insert(name);
  }
  for (const auto& [name, p] : params) {
    if (!loaded.count(name))
      throw ShapeError(file->path().string() + ": missing \"" + kPrefix + model::checkpoint_module_name(lm->config(), name) + "\"");
  }
  return o;
}

}  // namespace ctune::peft
