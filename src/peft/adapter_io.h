// LoRA adapters on disk in PEFT's layout (docs/formats.md#peft-lora-adapters): adapter_config.json and
// adapter_model.safetensors with keys base_model.model.<module>.lora_A.weight ([r, in]) and
// .lora_B.weight ([out, r]). Written atomically; read back with every unsupported setting
// refused by name, so an adapter either loads exactly or not at all.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder.h"
#include "peft/lora.h"

namespace ctune::peft {

inline constexpr const char* kAdapterConfig = "adapter_config.json";
inline constexpr const char* kAdapterWeights = "adapter_model.safetensors";

// Writes adapter_config.json and adapter_model.safetensors into an existing directory (e.g. a
// checkpoint being staged); no atomicity of its own.
void write_adapter_files(model::CausalLM& model, const LoraOptions& options, const std::filesystem::path& dir,
                         const std::string& base_model_name_or_path);

// The model's LoRA parameters by name (what an adapter file holds, before PEFT's prefix).
std::vector<std::pair<std::string, at::Tensor>> adapter_state_dict(model::CausalLM& model);

// The two halves of write_adapter_files: adapter_config.json, and adapter_model.safetensors
// from LoRA tensors under the model's parameter names (PEFT's base_model.model. prefix added).
void write_adapter_config(const LoraOptions& options, const std::filesystem::path& dir, const std::string& base_model_name_or_path);
// Names are written as the base checkpoint's class has the modules (model::checkpoint_module_name:
// a Gemma 3 wrapper's text model under model.language_model.), as PEFT on that class names them.
void write_adapter_tensors(const model::ModelConfig& base, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::filesystem::path& dir);

// Writes the model's LoRA weights (as fp32 unless they are stored otherwise) into `dir`,
// atomically (staged, then renamed).
void save_adapter(model::CausalLM& model, const LoraOptions& options, const std::filesystem::path& dir,
                  const std::string& base_model_name_or_path, bool overwrite);

// Reads dir/adapter_config.json into LoraOptions. Throws ConfigError / UnsupportedError.
LoraOptions read_adapter_config(const std::filesystem::path& dir);

// Attaches LoRA to `model` as the adapter's config says and loads its weights. Every target
// layer must receive both matrices with matching shapes.
LoraOptions load_adapter(model::CausalLM& model, const std::filesystem::path& dir);

}  // namespace ctune::peft
