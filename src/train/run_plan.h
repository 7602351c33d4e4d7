// From a resolved recipe to everything a run needs, with every cross-layer rule checked before
// any weight is loaded: the model directory and its config, checkpoint tensor names and shapes,
// the tokenizer and whether it fits the embedding, LoRA targets, the datasets (parsed and
// tokenized, errors naming file:line), step counts, and the techniques this build implements.
// `ctune validate` stops here; `ctune train` and `ctune eval` go on to build the model.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/recipe.h"
#include "data/dataset.h"
#include "data/options.h"
#include "model/config.h"
#include "peft/lora.h"
#include "quant/quantized_linear.h"
#include "tokenizer/tokenizer.h"
#include "train/grad_scaler.h"
#include "train/memory_ledger.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace ctune::train {

struct RunPlan {
  Recipe recipe;
  std::filesystem::path output_dir, model_dir, tokenizer_dir;
  model::ModelConfig model_config;
  at::ScalarType model_dtype = at::kFloat;    // storage dtype of the loaded weights
  at::ScalarType compute_dtype = at::kFloat;  // precision: the matmuls' dtype
  GradScalerOptions loss_scaling;             // enabled for fp16
  std::optional<quant::QuantSpec> quantize_base;  // memory.quantize_base (LoRA only)
  int threads = 1;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  data::DataOptions data;
  data::Datasets datasets;
  bool lora = false;
  peft::LoraOptions lora_options;
  std::filesystem::path init_adapter;  // peft.init_from, empty when none
  OptimizerOptions optimizer;
  TrainerOptions trainer;
  std::int64_t steps_per_epoch = 0;
  std::int64_t eval_batches = -1;  // -1: the whole eval split
  std::uint64_t shard_bytes = 5'000'000'000;  // checkpoint.shard_size

  // One line per fact, for logs and `ctune validate`.
  std::string summary() const;
};

// Throws ConfigError (naming the recipe file/override and key), IoError, FormatError.
RunPlan plan_run(Recipe recipe);

// The model the plan describes, weights loaded, LoRA applied (or everything trainable). With a
// checkpoint directory, the weights come from it: its adapter over model.path (LoRA) or its
// model files (full fine-tuning).
// The memory ledger's inputs for this plan; `runtime_bytes` is the process's resident memory
// before the model is built.
LedgerInputs ledger_inputs(const RunPlan& plan, std::int64_t runtime_bytes);

model::CausalLM build_model(const RunPlan& plan, peft::LoraSummary* summary,
                            const std::filesystem::path& checkpoint = {});

}  // namespace ctune::train
