// What a run trains: full fine-tuning or LoRA. The one object that knows, for its method, which
// parameters train, where the weights come from (the base, a checkpoint, an adapter to start
// from), what a checkpoint and the final result hold (the model in Hugging Face layout or the
// adapter in PEFT layout), and what the memory ledger counts per module. Everything else (the
// plan, the session, the ledger, checkpoints) asks it instead of branching on the method.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/method_names.h"
#include "model/decoder.h"
#include "peft/lora.h"
#include "peft/model_spec.h"

namespace ctune::train {

// How one module of the model trains under a method (for the memory ledger).
struct ModuleTraining {
  bool weight_trains = false;     // its own weight (and bias) get gradients and optimizer state
  std::int64_t adapter_rank = 0;  // a LoRA adapter of this rank beside it; 0: none
  double adapter_dropout = 0;     // the adapter's input dropout
};

// Where a run's weights are written from: recorded in adapter_config.json, copied beside a model.
struct WeightFiles {
  std::filesystem::path base_model_dir;
  std::filesystem::path tokenizer_dir;
  std::uint64_t max_shard_bytes = 5'000'000'000;
};

class Method {
 public:
  virtual ~Method() = default;

  virtual MethodKind kind() const = 0;
  // How a checkpoint records it ("full" | "lora", trainer_state.json): core/method_names.h.
  std::string name() const { return method_names(kind()).state; }
  virtual std::string describe() const = 0;  // one line for the plan's summary

  // The dtype the weights are loaded in, given model.dtype and the compute dtype (precision).
  // Throws ConfigError when the method cannot train in what was asked.
  virtual at::ScalarType storage_dtype(at::ScalarType requested, at::ScalarType compute) const = 0;
  // Whether the base stays frozen (a quantised base needs that).
  virtual bool freezes_base() const = 0;

  // The model to build from `base` (the run's model.path, dtypes, quantisation, recompute); when
  // resuming, from `checkpoint`'s weights instead.
  virtual peft::ModelSpec model_spec(peft::ModelSpec base, const std::filesystem::path& checkpoint) const = 0;
  // Binds the method's targets to the model (LoRA's all-linear expanded to its Linear layers) and
  // throws ConfigError when one is not in it (a shape-only model: this is planning, before any
  // weight is read).
  virtual void resolve_targets(model::CausalLM& shape_only) = 0;
  // Marks what trains in a built model; returns the parameter counts.
  virtual peft::LoraSummary make_trainable(model::CausalLM& model) const = 0;

  // The ledger's view of one module by its leaf name (q_proj, ..., lm_head, embed_tokens, norm).
  virtual ModuleTraining module(const std::string& name) const = 0;

  // The weights, as a checkpoint or the result holds them, written into an existing directory:
  // write_weight_metadata, then write_weight_tensors of weight_tensors(model).
  void write_weights(model::CausalLM& model, const std::filesystem::path& dir, const WeightFiles& files) const;
  // What the weights hold besides their tensors: config.json and the tokenizer files, or
  // adapter_config.json (a sharded checkpoint holds these; its tensors are in its shards).
  virtual void write_weight_metadata(const model::ModelConfig& config, const std::filesystem::path& dir,
                                     const WeightFiles& files) const = 0;
  // The larger files of those (the tokenizer's), in bytes: what train/forecast/disk_need.h counts
  // beside the tensors.
  virtual std::int64_t weight_metadata_bytes(const WeightFiles& files) const = 0;
  // The tensors of the weights, by the model's parameter names: every parameter of full
  // fine-tuning, the adapters of LoRA; in both cases exactly the trainable parameters.
  virtual std::vector<std::pair<std::string, at::Tensor>> weight_tensors(model::CausalLM& model) const = 0;
  // The result's directory name in output_dir: "model" or "adapter" (core/method_names.h).
  std::string result_name() const { return method_names(kind()).result_dir; }
  // Writes output_dir/result_name() atomically (staged, then renamed over an earlier one).
  void write_result(model::CausalLM& model, const std::filesystem::path& output_dir, const WeightFiles& files) const;
};

// Writes `tensors` (weight_tensors' names) into `dir` as the weights of `method` (full: a
// Hugging Face model's safetensors, sharded past max_shard_bytes; lora: PEFT's
// adapter_model.safetensors, named for `base`'s checkpoint class). Needs no model: `ctune
// consolidate` writes assembled shards.
void write_weight_tensors(MethodKind method, const model::ModelConfig& base,
                          const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::filesystem::path& dir,
                          std::uint64_t max_shard_bytes);

// The one factory: the method named `name` (the recipe's peft.method or a checkpoint's "method",
// core/method_names.h). LoRA takes `lora`; with `init_from`, training starts from that PEFT
// adapter (its config replaces `lora`, see peft::read_adapter_config). Throws ConfigError for an
// unknown name, or an adapter to start from without LoRA.
std::shared_ptr<Method> make_method(const std::string& name, peft::LoraOptions lora = {}, std::filesystem::path init_from = {});

}  // namespace ctune::train
