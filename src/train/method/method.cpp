#include "train/method/method.h"

#include <algorithm>

#include "core/error.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "model/weights.h"
#include "peft/adapter_io.h"

namespace ctune::train {
namespace fs = std::filesystem;

void Method::write_weights(model::CausalLM& model, const fs::path& dir, const WeightFiles& files) const {
  write_weight_metadata(model->config(), dir, files);
  write_weight_tensors(kind(), model->config(), weight_tensors(model), dir, files.max_shard_bytes);
}

void write_weight_tensors(MethodKind method, const model::ModelConfig& base,
                          const std::vector<std::pair<std::string, at::Tensor>>& tensors, const fs::path& dir,
                          std::uint64_t max_shard_bytes) {
  switch (method) {
    case MethodKind::full:
      model::write_model_tensors(tensors, dir, max_shard_bytes);
      return;
    case MethodKind::lora:
      peft::write_adapter_tensors(base, tensors, dir);
      return;
  }
}

void Method::write_result(model::CausalLM& model, const fs::path& output_dir, const WeightFiles& files) const {
  io::StagingDir staging(output_dir / result_name(), /*overwrite=*/true);
  write_weights(model, staging.path(), files);
  staging.commit();
}

namespace {

// Every parameter trains; weights are fp32 masters; the result is a Hugging Face model
// directory with the tokenizer files, and so is a checkpoint's weights.
class FullFinetuning : public Method {
 public:
  MethodKind kind() const override { return MethodKind::full; }
  std::string describe() const override { return method_names(kind()).title; }

  at::ScalarType storage_dtype(at::ScalarType requested, at::ScalarType compute) const override {
    if (compute != at::kFloat) return at::kFloat;  // fp32 masters, low-precision matmuls
    if (requested != at::kFloat) {
      // Updating bf16/fp16 weights directly would lose every update smaller than their rounding.
      throw ConfigError("full fine-tuning updates the weights themselves: load them in fp32 (model.dtype: fp32), "
                        "or set precision: bf16 to compute in bf16 with fp32 master weights");
    }
    return at::kFloat;
  }
  bool freezes_base() const override { return false; }

  peft::ModelSpec model_spec(peft::ModelSpec base, const fs::path& checkpoint) const override {
    if (!checkpoint.empty()) base.weights = checkpoint;  // a checkpoint holds the whole model
    return base;
  }
  void resolve_targets(model::CausalLM&) override {}
  peft::LoraSummary make_trainable(model::CausalLM& model) const override { return peft::enable_full_finetune(model); }

  ModuleTraining module(const std::string&) const override { return {true, 0, 0.0}; }

  void write_weight_metadata(const model::ModelConfig& config, const fs::path& dir, const WeightFiles& files) const override {
    model::write_model_config(config, at::kFloat, dir);  // fp32 masters (storage_dtype)
    io::copy_tokenizer_files(files.tokenizer_dir, dir);
  }
  std::int64_t weight_metadata_bytes(const WeightFiles& files) const override { return io::tokenizer_files_bytes(files.tokenizer_dir); }
  std::vector<std::pair<std::string, at::Tensor>> weight_tensors(model::CausalLM& model) const override {
    return model::checkpoint_state_dict(model);
  }
};

// Only the adapters train, in fp32, over a frozen base stored in the compute dtype (or
// quantised); the result is the adapter in PEFT layout, and so is a checkpoint's weights.
class Lora : public Method {
 public:
  Lora(peft::LoraOptions options, fs::path init_from) : options_(std::move(options)), init_from_(std::move(init_from)) {
    if (init_from_.empty()) return;
    const peft::LoraOptions adapter = peft::read_adapter_config(init_from_);
    if (options_.modules_to_save != adapter.modules_to_save && !options_.modules_to_save.empty())
      throw ConfigError("peft.train_router: the adapter to start from trained no routers (its modules_to_save has no \"gate\")");
    options_ = adapter;
  }

  MethodKind kind() const override { return MethodKind::lora; }
  std::string describe() const override {
    return "LoRA r=" + std::to_string(options_.rank) + " alpha=" + std::to_string(options_.alpha) +
           (options_.rslora ? " (rsLoRA)" : "") + " on " + std::to_string(options_.targets.size()) + " target kinds" +
           (options_.modules_to_save.empty() ? std::string() : ", routers trained") +
           (init_from_.empty() ? std::string() : ", starting from " + init_from_.string());
  }

  at::ScalarType storage_dtype(at::ScalarType requested, at::ScalarType compute) const override {
    return compute != at::kFloat ? compute : requested;  // the frozen base needs no fp32 copy
  }
  bool freezes_base() const override { return true; }

  peft::ModelSpec model_spec(peft::ModelSpec base, const fs::path& checkpoint) const override {
    // A checkpoint holds the adapter (over model.path); otherwise start from init_from or fresh.
    base.adapter = !checkpoint.empty() ? checkpoint : init_from_;
    if (base.adapter.empty()) base.new_adapter = options_;
    return base;
  }
  void resolve_targets(model::CausalLM& shape_only) override {
    options_.targets = peft::resolve_targets(shape_only, options_.targets);
    peft::LoraOptions shapes = options_;
    shapes.initialise = false;  // a 30B model's adapters are gigabytes: planning touches none of them
    peft::apply_lora(shape_only, shapes);
  }
  peft::LoraSummary make_trainable(model::CausalLM& model) const override { return peft::enable_lora_training(model); }

  ModuleTraining module(const std::string& name) const override {
    const bool targeted = std::find(options_.targets.begin(), options_.targets.end(), name) != options_.targets.end();
    const bool saved = std::find(options_.modules_to_save.begin(), options_.modules_to_save.end(), name) != options_.modules_to_save.end();
    return {saved, targeted ? options_.rank : 0, targeted ? options_.dropout : 0.0};
  }

  void write_weight_metadata(const model::ModelConfig& /*config*/, const fs::path& dir, const WeightFiles& files) const override {
    peft::write_adapter_config(options_, dir, fs::absolute(files.base_model_dir).string());
  }
  std::int64_t weight_metadata_bytes(const WeightFiles& /*files*/) const override { return 0; }  // adapter_config.json: a kilobyte
  std::vector<std::pair<std::string, at::Tensor>> weight_tensors(model::CausalLM& model) const override {
    return peft::adapter_state_dict(model);
  }

 private:
  peft::LoraOptions options_;
  fs::path init_from_;
};

}  // namespace

std::shared_ptr<Method> make_method(const std::string& name, peft::LoraOptions lora, fs::path init_from) {
  const MethodNames* method = find_method(name);
  if (method == nullptr) throw ConfigError("method \"" + name + "\": expected one of " + [] {
    std::string list;
    for (const auto& m : method_table()) list += (list.empty() ? "" : ", ") + std::string(m.recipe);
    return list;
  }());
  switch (method->kind) {
    case MethodKind::full:
      if (!init_from.empty()) throw ConfigError("an adapter to start from needs peft.method: lora");
      return std::make_shared<FullFinetuning>();
    case MethodKind::lora:
      return std::make_shared<Lora>(std::move(lora), std::move(init_from));
  }
  return nullptr;  // unreachable: every kind is a case
}

}  // namespace ctune::train
