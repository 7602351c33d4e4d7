// Moving weights between a CausalLM and Hugging Face checkpoint directories: load (every
// missing, unexpected or wrongly shaped tensor reported by name and file), save (sharded as HF
// does, tied head dropped, written into a staging directory and renamed), random init.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "model/decoder.h"

namespace ctune::model {

// Builds the model for `dir` (config.json + safetensors) with parameters in `dtype`.
// Parameters borrow the mapped files when the stored dtype equals `dtype`. Refused with
// MemoryError before anything is allocated when the process cannot hold what loading needs
// (load_footprint, ops::require_host_memory).
CausalLM load_causal_lm(const std::filesystem::path& dir, at::ScalarType dtype);

// What building and loading the model of `checkpoint` in `dtype` allocates. Every parameter's
// bytes are reserved when the model is built (address space, untouched); those stored in another
// dtype are converted into new memory, the rest borrow the mapped files (which the kernel can
// page out and read again, so they need no memory of their own).
struct LoadFootprint {
  std::int64_t reserved = 0;   // every parameter in `dtype`
  std::int64_t converted = 0;  // those stored in another dtype, in `dtype`
  std::int64_t largest = 0;    // the largest parameter in `dtype` (a stacked expert tensor counted once)
  std::size_t tensors = 0, converted_tensors = 0;
  std::string stored;  // the stored dtype converted from ("bfloat16"), when any
};
LoadFootprint load_footprint(const ModelConfig& config, const io::CheckpointReader& checkpoint, at::ScalarType dtype);
// "75 of 75 tensors converted from F32 (...)": the footprint's new memory, in words.
std::string describe_conversion(const LoadFootprint& f, at::ScalarType dtype);

// The module a sparse layer's experts are stacked under in this checkpoint ("mlp" for
// transformers v5's mlp.experts.gate_up_proj), or empty: one module per expert, or no experts.
// Reading follows the checkpoint; ModelConfig::stacked_experts says how to write.
std::string stacked_experts_module(const ModelConfig& config, const io::CheckpointReader& checkpoint);

// The modules (leaf names: "in_proj_qkv") whose weights the family's checkpoints store inside a
// fused tensor (Family::fused_tensors); empty for most families.
std::vector<std::string> fused_modules(const ModelConfig& config);

// Checks that the checkpoint holds exactly the model's tensors with the model's shapes;
// throws ShapeError listing every missing, unexpected and wrongly shaped tensor.
void check_weights(CausalLM& model, const io::CheckpointReader& checkpoint);

// check_weights, then points every parameter at its checkpoint tensor (converted to the
// parameter's dtype; borrowed from the mapped file when the dtype matches).
void load_weights(CausalLM& model, const io::CheckpointReader& checkpoint);

// The tensors HF would save, in state-dict order (lm_head.weight omitted when tied), one per
// parameter (a sparse layer's experts one module each).
std::vector<std::pair<std::string, at::Tensor>> hf_state_dict(CausalLM& model);
// hf_state_dict in the layout the model's checkpoint had: the family's fused tensors
// (Family::fused_tensors: Qwen3-Next's in_proj_qkvz, in_proj_ba) interleaved back from the
// parameters the loader split them into, and with ModelConfig::stacked_experts each sparse
// layer's experts stacked back into gate_up_proj and down_proj (new tensors).
std::vector<std::pair<std::string, at::Tensor>> checkpoint_state_dict(CausalLM& model);
// `state` (the model's parameters by name, as hf_state_dict) with each layer's fused parameters
// replaced, where the first of them was, by the checkpoint tensor that holds them (a new tensor).
std::vector<std::pair<std::string, at::Tensor>> fuse_parameters(const ModelConfig& config,
                                                                 std::vector<std::pair<std::string, at::Tensor>> state);

// Module names as the checkpoint's own transformers class spells them, for files keyed by
// module (PEFT adapters): the model's name, or for a multimodal wrapper's text model its place
// in the wrapper today ("model.language_model.layers.0..." for Gemma 3, model/family.h).
std::string checkpoint_module_name(const ModelConfig& config, const std::string& name);
// The inverse, accepting every spelling the wrapper has had (and the model's own names).
std::string model_module_name(const ModelConfig& config, const std::string& checkpoint_name);

struct SaveOptions {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // HF's default "5GB"
  bool overwrite = false;
};
// The two halves of write_causal_lm_files: config.json (torch_dtype `dtype`), and tensors
// under HF names (sharded past max_shard_bytes, with the index when there are several files).
void write_model_config(const ModelConfig& config, at::ScalarType dtype, const std::filesystem::path& dir);
void write_model_tensors(const std::vector<std::pair<std::string, at::Tensor>>& state, const std::filesystem::path& dir,
                         std::uint64_t max_shard_bytes);

// Writes config.json and the weights (sharded past options.max_shard_bytes) into an existing
// directory, e.g. a checkpoint being staged; no atomicity of its own.
void write_causal_lm_files(CausalLM& model, const std::filesystem::path& dir, std::uint64_t max_shard_bytes);

// Writes config.json and the weights into `dir` (atomically: all or nothing). `write_extra`,
// when given, adds files (e.g. the tokenizer) to the staging directory before it is renamed.
void save_causal_lm(CausalLM& model, const std::filesystem::path& dir, const SaveOptions& options,
                    const std::function<void(const std::filesystem::path&)>& write_extra = {});

// HF's _init_weights: Linear and Embedding weights ~ N(0, initializer_range), biases 0,
// RMSNorm weights 1 (0 for Gemma's (1 + w) norms, so the scale is 1 either way). Deterministic
// for a seed.
void init_weights(CausalLM& model, std::uint64_t seed);

}  // namespace ctune::model
