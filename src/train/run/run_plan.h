// From a resolved recipe to everything a run needs, with every cross-layer rule checked before
// any weight is loaded: the model directory and its config, checkpoint tensor names and shapes,
// the tokenizer and whether it fits the embedding, LoRA targets, the datasets (parsed and
// tokenized, errors naming file:line), step counts, and the techniques this build implements.
// `ctune validate` stops here; `ctune train` and `ctune eval` go on to build the model.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/recipe.h"
#include "data/dataset.h"
#include "data/options.h"
#include "data/sampler.h"
#include "distributed/world.h"
#include "io/run_dir.h"
#include "model/config.h"
#include "model/recompute.h"
#include "peft/model_spec.h"
#include "quant/quantized_linear.h"
#include "tokenizer/tokenizer.h"
#include "train/forecast/disk_need.h"
#include "train/forecast/memory_ledger.h"
#include "train/method/distributed_plan.h"
#include "train/method/method.h"
#include "train/objective/objectives.h"
#include "train/step/grad_scaler.h"
#include "train/step/optimizer.h"
#include "train/step/trainer.h"

namespace ctune::train {

// When checkpoints are written and how many are kept (checkpoint.*).
struct CheckpointPolicy {
  std::int64_t every_n_steps = 0;  // 0: only at the end
  std::int64_t keep_last = 1;
  std::uint64_t shard_bytes = 5'000'000'000;  // checkpoint.shard_size (full-model checkpoints)
  bool sharded = false;  // checkpoint.layout: one file per rank (train/state/sharded_checkpoint.h)
};

// How the run spreads over ranks (distributed.*; the world itself comes from the launcher's
// environment, dist/world.h).

// What a plan is for. run: everything the run reads must be there (weights, tokenizer, data).
// shapes: `ctune estimate`, which needs the model's config.json and the recipe: what is there is
// checked as for a run, and missing weights, tokenizer or data are planned without (a 30B
// model's memory can be predicted before it is downloaded); such a plan only feeds the ledger.
enum class PlanScope { run, shapes };

// Everything a run needs, resolved from the recipe by plan_run(). Nothing reads the recipe after
// planning: every value is here.
struct RunPlan {
  PlanScope scope = PlanScope::run;
  Recipe recipe;  // the resolved recipe, read only by plan_run (run_plan*.cpp)
  std::filesystem::path output_dir, model_dir, tokenizer_dir;
  // What the run reads, by recipe key: model.path, tokenizer.path, data.train, data.eval (when
  // set), peft.init_from (when set). Nothing may write over them; checkpoints record them.
  io::NamedPaths inputs;
  model::ModelConfig model_config;
  std::vector<model::ParameterShape> parameters;  // of the shape-only model (model/parameter_shapes.h)
  std::shared_ptr<const Method> method;       // full fine-tuning or LoRA
  bool continues_adapter = false;             // peft.init_from: LoRA starts from an existing adapter
  at::ScalarType model_dtype = at::kFloat;    // storage dtype of the loaded weights
  at::ScalarType compute_dtype = at::kFloat;  // precision: the matmuls' dtype
  GradScalerOptions loss_scaling;             // enabled for fp16
  std::optional<quant::QuantSpec> quantize_base;  // memory.quantize_base (LoRA only)
  model::RecomputePolicy recompute;           // memory.activation_checkpointing
  bool exact_allocator = false;               // memory.allocator: exact
  std::int64_t memory_limit = 0;              // memory.limit in bytes (0: none)
  at::Device device = at::kCPU;               // device: where the model and batches live
  int threads = 1;
  std::uint64_t seed = 42;
  std::unique_ptr<tok::Tokenizer> tokenizer;  // null only in a shapes plan without one
  data::DataOptions data;
  data::Datasets datasets;
  OptimizerOptions optimizer;
  TrainerOptions trainer;
  ObjectiveOptions objective;                 // objective.*: what the steps minimise (its kind and options)
  std::optional<quant::QuantSpec> reference_quantize;  // objective.reference_quantize (a full fine-tuning reference)
  // objective.teacher (distill): the teacher as build_teacher builds it, its config and shapes.
  struct Teacher {
    peft::ModelSpec spec;
    model::ModelConfig config;
    std::vector<model::ParameterShape> parameters;
  };
  std::optional<Teacher> teacher;
  std::int64_t steps_per_epoch = 0;
  double packed_fill = 0;  // packing: document tokens over row capacity in the first epoch
  std::int64_t eval_batches = -1;  // -1: the whole eval split
  CheckpointPolicy checkpoint;
  bool tensorboard = true;  // logging.tensorboard: event files beside metrics.jsonl
  bool profile = false;     // logging.profile: each step timed by category (train/observe/profiler.h)
  std::int64_t samples_every = 0;  // logging.samples_every_n_steps (grpo): samples.jsonl
  distributed::World world;  // this process's rank and the world size (1: a single process)
  DistributedPlan distributed;

  // The model the run trains (and `eval` evaluates): model.path in the planned dtypes, with the
  // method's adapter, the quantised base and recomputation; from `checkpoint`'s weights when
  // resuming.
  peft::ModelSpec model_spec(const std::filesystem::path& checkpoint = {}) const;
  // The training sampler's options: each micro-batch is the global batch, data.batch_size rows
  // per rank (train/parallel/data_parallel.h gives each rank its rows).
  data::SamplerOptions sampler_options() const;
  // The resolved recipe as YAML (written to output_dir/recipe.yaml and into checkpoints).
  std::string recipe_yaml() const;
  // One line per fact, for logs and `ctune validate`.
  std::string summary() const;
};

// Throws ConfigError (naming the recipe file/override and key), IoError, FormatError. `world`:
// where this process stands in a multi-process run.
RunPlan plan_run(Recipe recipe, const distributed::World& world = {}, PlanScope scope = PlanScope::run);

// What a run reads, by recipe key (RunPlan::inputs): model.path, tokenizer.path (model.path when
// null), data.train, and data.eval and peft.init_from when set. `ctune plan --write` must not
// replace them either.
io::NamedPaths recipe_inputs(const Recipe& recipe);

// The quantised base that memory.quantize_base (int8 or nf4) and its memory.* settings describe.
// `kind_key`: the recipe key that names the kind (objective.reference_quantize for a reference).
quant::QuantSpec quant_spec(const Recipe& recipe, const std::string& kind_key = "memory.quantize_base");

// distributed.timeout_s, for joining the ranks (before the run is planned, so that a rank whose
// planning fails can tell the others at once).
std::chrono::milliseconds distributed_timeout(const Recipe& recipe);

// The model of plan.model_spec(checkpoint), built (nothing trains yet: Method::make_trainable).
model::CausalLM build_model(const RunPlan& plan, const std::filesystem::path& checkpoint = {});

// The frozen reference a preference objective compares the policy with, under full fine-tuning:
// model.path built as the policy is (dtype, device; projections int8 or nf4 with
// objective.reference_quantize), every parameter frozen, in eval mode. Null
// when the objective needs none, and under LoRA, where the policy with its adapters off is the
// reference (no second copy of the weights).
model::CausalLM build_reference(const RunPlan& plan);

// The objective's teacher (RunPlan::teacher: objective.teacher.path in its dtype, the run's
// compute dtype and device), every parameter frozen, in eval mode; null when it has none.
model::CausalLM build_teacher(const RunPlan& plan);

// The memory ledger's inputs for this plan; `runtime_bytes` is the process's resident memory
// before the model is built.
LedgerInputs ledger_inputs(const RunPlan& plan, std::int64_t runtime_bytes);

// Where the run's weights take their files beside the tensors from (the base, the tokenizer), and
// how large a shard may be.
WeightFiles weight_files(const RunPlan& plan);

// What the plan's run writes (train/forecast/disk_need.h): a checkpoint and the result, from the
// ledger's trainable count and optimizer state and the method's files beside the tensors; and
// when it checkpoints and keeps, for a run from its start into an empty output_dir.
RunWrites run_writes(const RunPlan& plan, const Ledger& ledger);
CheckpointSchedule checkpoint_schedule(const RunPlan& plan);

// The memory and speed techniques `ctune plan` chooses (train/plan/planner.h), as the recipe's
// planned keys hold them (core/recipe_schema.h).
struct Techniques {
  std::string precision = "fp32";       // precision
  std::string method = "none";          // peft.method
  std::string quantize_base = "none";   // memory.quantize_base
  std::string checkpointing = "none";   // memory.activation_checkpointing
  std::int64_t batch_size = 1;          // training.batch_size (per rank)
  std::int64_t grad_accum = 1;          // training.grad_accum
  bool chunked_loss = true;             // memory.chunked_loss
  std::string strategy = "no_shard";    // distributed.strategy
  bool cpu_offload = false;             // distributed.cpu_offload
  // The key=value overrides that set them in a recipe.
  std::vector<std::string> overrides() const;
};

// The ledger's inputs of `plan` run with techniques `t` instead of its own: what plan_run would
// resolve from a recipe setting them. `method` is t.method's (the plan's own, or full
// fine-tuning). Throws ConfigError when the combination cannot run (full fine-tuning of a bf16
// checkpoint in fp32 precision).
LedgerInputs ledger_inputs(const RunPlan& plan, std::int64_t runtime_bytes, const Techniques& t,
                           std::shared_ptr<const Method> method);

// Whether the run a checkpoint was written by (its resolved recipe, `saved_yaml`, read from
// `where`) is this plan's run: throws ConfigError naming the first key that changes what is
// computed (model, tokenizer, data, LoRA, batch geometry, optimizer, the schedule, including
// its length when it decays; saved vs now); returns one note per harmless change (logging,
// evaluation and checkpoint cadence, a longer run on a constant schedule). With
// `inputs_by_identity` the input paths (RunPlan::inputs) are not compared as text: the caller
// compares what they hold (train/run/session.cpp). `saved_global_rows`: the rows of one global
// micro-batch when the checkpoint was written (its sampler state); training.batch_size may
// change with the number of ranks as long as batch_size x ranks stays that. How the ranks
// share the work (distributed.*) never changes what is computed. In run_plan_resume.cpp.
std::vector<std::string> check_resume_compatible(const RunPlan& plan, const std::string& saved_yaml,
                                                 const std::string& where, std::int64_t checkpoint_step,
                                                 bool inputs_by_identity, std::int64_t saved_global_rows);

}  // namespace ctune::train
