#include "train/run/run_plan.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/quant_names.h"
#include "core/recipe_schema.h"
#include "core/log.h"
#include "core/threads.h"
#include "data/batch.h"
#include "data/sampler.h"
#include "io/hf_checkpoint.h"
#include "model/decoder.h"
#include "model/moe.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "ops/attention_tiled.h"
#include "ops/compute.h"
#include "ops/cpu_gemm.h"
#include "ops/device.h"
#include "ops/fused_optimizer.h"
#include "ops/gated_delta.h"
#include "ops/threads.h"
#include "peft/adapter_io.h"
#include "tokenizer/load.h"
#include "train/objective/shared_prompt.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

// Runs `f`; a ctune error from a lower layer is re-raised with the recipe key that led there.
template <typename F>
auto for_key(const Recipe& r, const std::string& key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const MemoryError&) {
    throw;  // what the process can hold, not the key's value
  } catch (const Error& e) {
    r.fail(key, e.what());
  }
}

DistributedPlan distributed_plan(const Recipe& r) {
  DistributedPlan d;
  d.strategy = r.get_string("distributed.strategy");
  d.cpu_offload = r.get_bool("distributed.cpu_offload");
  d.prefetch = r.get_bool("distributed.prefetch");
  // Offload keeps shards in host memory: there must be shards of the parameters.
  if (d.cpu_offload && d.strategy != "full_shard" && d.strategy != "hybrid_shard") {
    r.fail("distributed.cpu_offload", "offload moves parameter shards to host memory; it needs distributed.strategy full_shard or hybrid_shard, found " +
                                          d.strategy);
  }
  const std::string backend = r.get_string("distributed.backend");
  // This build runs on the CPU: Gloo is the backend for CPU tensors.
  if (backend == "nccl") r.fail("distributed.backend", "nccl needs a CUDA build of LibTorch; this build is CPU-only (use gloo or auto)");
  d.backend = "gloo";
  return d;
}

data::DataOptions data_options(const Recipe& r, const fs::path& tokenizer_dir) {
  data::DataOptions d;
  d.train = r.get_string("data.train");
  if (auto eval = r.get_optional_string("data.eval")) d.eval = *eval;
  d.eval_fraction = r.get_float("data.eval_fraction");
  d.format = data::parse_data_format(r.get_string("data.format"));
  d.columns.instruction = r.get_string("data.columns.instruction");
  d.columns.input = r.get_string("data.columns.input");
  d.columns.output = r.get_string("data.columns.output");
  d.columns.messages = r.get_string("data.columns.messages");
  d.columns.text = r.get_string("data.columns.text");
  d.columns.tools = r.get_string("data.columns.tools");
  d.columns.prompt = r.get_string("data.columns.prompt");
  d.columns.chosen = r.get_string("data.columns.chosen");
  d.columns.rejected = r.get_string("data.columns.rejected");
  d.columns.completion = r.get_string("data.columns.completion");
  d.columns.label = r.get_string("data.columns.label");
  d.truncation = data::parse_truncation(r.get_string("data.truncation"));
  d.chat_format = data::parse_chat_format(r.get_string("data.chat_format"));
  d.chat_template = r.get_optional_string("data.chat_template").value_or("");
  d.template_kwargs = r.get_map("data.template_kwargs");
  d.instruct_template = data::parse_instruct_template(r.get_string("data.instruct_template"));
  d.train_on_input = r.get_bool("data.train_on_input");
  d.parse_special_in_content = r.get_bool("data.parse_special_in_content");
  d.max_seq_len = r.get_int("data.max_seq_len");
  d.packing = r.get_bool("data.packing");
  d.packing_window = r.get_int("data.packing_window");
  d.packing_split = r.get_bool("data.packing_split");
  if (d.packing_split && !d.packing) r.fail("data.packing_split", "needs data.packing: true");
  d.shuffle = r.get_bool("data.shuffle");
  d.on_error = data::parse_on_error(r.get_string("data.on_error"));
  d.add_eos = r.get_bool("data.add_eos");
  d.seed = static_cast<std::uint64_t>(r.get_int("seed"));  // the run's seed (RunPlan::seed)
  d.batch_size = r.get_int("training.batch_size");
  d.tokenizer_dir = tokenizer_dir;
  return d;
}

}  // namespace

io::NamedPaths recipe_inputs(const Recipe& r) {
  const std::string model = r.get_string("model.path");
  io::NamedPaths inputs = {{"model.path", model},
                           {"tokenizer.path", r.is_null("tokenizer.path") ? model : r.get_string("tokenizer.path")},
                           {"data.train", r.get_string("data.train")}};
  for (const char* key : {"data.eval", "peft.init_from", "objective.teacher.path"})
    if (auto path = r.get_optional_string(key)) inputs.emplace_back(key, *path);
  return inputs;
}

std::chrono::milliseconds distributed_timeout(const Recipe& r) { return std::chrono::seconds(r.get_int("distributed.timeout_s")); }

quant::QuantSpec quant_spec(const Recipe& r, const std::string& kind_key) {
  quant::QuantSpec spec;
  spec.kind = quant::parse_quant_kind(r.get_string(kind_key));
  spec.threshold = r.get_float("memory.int8_threshold");
  spec.int8_kernel = quant::parse_int8_kernel(r.get_string("memory.int8_kernel"));
  spec.blocksize = r.get_int("memory.nf4_blocksize");
  if ((spec.blocksize & (spec.blocksize - 1)) != 0) {
    r.fail("memory.nf4_blocksize", "expected a power of two from 64 to 4096, found " + std::to_string(spec.blocksize));
  }
  spec.double_quant = r.get_bool("memory.nf4_double_quant");
  return spec;
}

namespace {

// Model: config, checkpoint headers, and their agreement (no weight is read); the tokenizer, and
// whether its ids fit the embedding. Returns the shape-only model the checks used (uninitialised:
// no memory touched), for the method's checks too.
model::CausalLM plan_model(RunPlan& p) {
  const Recipe& r = p.recipe;
  p.model_dir = r.get_string("model.path");
  p.model_dtype = model::parse_dtype(r.get_string("model.dtype"), "model.dtype");
  p.compute_dtype = model::parse_dtype(r.get_string("precision"), "precision");
  p.device = for_key(r, "device", [&] { return ops::parse_device(r.get_string("device")); });
  // Planning (estimate, plan) also takes a config.json file itself (recipes/models/*.json): a
  // model that is not downloaded yet.
  const bool config_file = p.scope == PlanScope::shapes && fs::is_regular_file(p.model_dir);
  p.model_config = for_key(r, "model.path", [&] {
    return config_file ? model::parse_model_config(read_json_file(p.model_dir), p.model_dir.string()) : model::load_model_config(p.model_dir);
  });
  model::CausalLM shape_only(p.model_config, p.model_dtype);
  p.parameters = model::parameter_shapes(*shape_only);
  const bool weights = !config_file && (fs::exists(p.model_dir / io::kSingleFileName) || fs::exists(p.model_dir / io::kIndexFileName));
  if (p.scope == PlanScope::shapes && !weights) {
    spdlog::info("{}: no weights, so planned from config.json alone", p.model_dir.string());
  } else {
    for_key(r, "model.path", [&] {
      io::CheckpointReader checkpoint(p.model_dir);
      model::check_weights(shape_only, checkpoint);
    });
  }
  if (r.get_int("data.max_seq_len") > p.model_config.max_position_embeddings) {
    spdlog::warn("{}: `data.max_seq_len` {} is past the model's max_position_embeddings {}: positions beyond it were "
                 "never trained, and the model's own config says not to use them",
                 r.origin("data.max_seq_len"), r.get_int("data.max_seq_len"), p.model_config.max_position_embeddings);
  }

  // Tokenizer, and whether its ids fit the embedding.
  p.tokenizer_dir = r.is_null("tokenizer.path") ? p.model_dir : fs::path(r.get_string("tokenizer.path"));
  if (p.scope == PlanScope::shapes && ((config_file && r.is_null("tokenizer.path")) || !tok::has_tokenizer(p.tokenizer_dir))) {
    spdlog::info("{}: no tokenizer, so no data read either", p.tokenizer_dir.string());
    return shape_only;
  }
  p.tokenizer = for_key(r, r.is_null("tokenizer.path") ? "model.path" : "tokenizer.path",
                        [&] { return tok::load_tokenizer(p.tokenizer_dir); });
  if (static_cast<std::int64_t>(p.tokenizer->vocab_size()) > p.model_config.vocab_size) {
    r.fail(r.is_null("tokenizer.path") ? "model.path" : "tokenizer.path",
           "tokenizer has " + std::to_string(p.tokenizer->vocab_size()) + " tokens but the model's embedding has " +
               std::to_string(p.model_config.vocab_size) + " rows (expected tokenizer size <= vocab_size)");
  }
  return shape_only;
}

// The method: what trains, and the dtype the weights are stored in for it; memory techniques.
void plan_method(RunPlan& p, model::CausalLM& shape_only) {
  const Recipe& r = p.recipe;
  //    One factory by name (train/method/method.h); the LoRA keys are read whatever the method, as
  //    the schema has validated them.
  peft::LoraOptions lora;
  lora.rank = r.get_int("peft.rank");
  lora.alpha = r.get_float("peft.alpha");
  lora.dropout = r.get_float("peft.dropout");
  lora.rslora = r.get_bool("peft.rslora");
  lora.targets = r.get_strings("peft.target_modules");
  lora.seed = p.seed;
  if (r.get_bool("peft.train_router")) {
    if (p.model_config.arch.moe.experts == 0)
      r.fail("peft.train_router", "model_type " + p.model_config.model_type + " has no experts, so no router to train");
    if (r.get_string("peft.method") != "lora")
      r.fail("peft.train_router", "applies to LoRA (peft.method: lora); full fine-tuning trains the routers already");
    lora.modules_to_save = {"gate"};
  }
  const fs::path init_from = r.get_optional_string("peft.init_from").value_or("");
  auto method = for_key(r, init_from.empty() ? "peft.method" : "peft.init_from",
                        [&] { return make_method(r.get_string("peft.method"), lora, init_from); });
  for_key(r, init_from.empty() ? "peft.target_modules" : "peft.init_from", [&] { method->resolve_targets(shape_only); });
  p.method = method;
  p.continues_adapter = !init_from.empty();
  // Mixed precision: weights that train are fp32 masters; a frozen LoRA base is stored in the
  // compute dtype, with no fp32 copy.
  p.model_dtype = for_key(r, "model.dtype", [&] { return p.method->storage_dtype(p.model_dtype, p.compute_dtype); });
  p.loss_scaling.enabled = p.compute_dtype == at::kHalf;
  if (r.get_string("memory.quantize_base") != kQuantNone) {
    if (!p.method->freezes_base()) {
      r.fail("memory.quantize_base", "a quantised base is frozen, so it needs LoRA (peft.method: lora), found peft.method: none");
    }
    p.quantize_base = quant_spec(r);
  }
  p.recompute = for_key(r, "memory.activation_checkpointing",
                        [&] { return model::RecomputePolicy::parse(r.get_string("memory.activation_checkpointing")); });
  p.recompute.blocked_attention = r.get_string("memory.attention") == "blocked";
  p.exact_allocator = r.get_string("memory.allocator") == "exact";
  if (!r.is_null("memory.limit")) {
    p.memory_limit = io::parse_byte_size(r.get_string("memory.limit"), r.origin("memory.limit") + ": `memory.limit`");
    // On the CPU the tensor pool holds the limit (ops/tensor_pool.h); exact mode has no pool.
    if (p.exact_allocator && p.device.is_cpu()) {
      r.fail("memory.limit", "the limit is held by the tensor pool (memory.allocator: fast), found memory.allocator: exact");
    }
  }
  p.loss_scaling.init_scale = r.get_float("loss_scaling.init_scale");
  p.loss_scaling.growth_factor = r.get_float("loss_scaling.growth_factor");
  p.loss_scaling.backoff_factor = r.get_float("loss_scaling.backoff_factor");
  p.loss_scaling.growth_interval = r.get_int("loss_scaling.growth_interval");
}

// A key of another objective (KeySpec::objectives) is refused rather than ignored: it would change
// nothing the user expects.
void refuse_keys_of_other_objectives(const Recipe& r, const std::string& objective) {
  for (const KeySpec& spec : recipe_schema()) {
    const auto& names = spec.objectives;
    if (names.empty() || r.is_null(spec.key) || std::find(names.begin(), names.end(), objective) != names.end()) continue;
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    r.fail(spec.key, "belongs to objective.name: " + list + "; this recipe's objective is " + objective);
  }
}

// data.format against what the objective learns from (ObjectiveData). `mine`: the checks of the
// objective's own data, made after its options are read; otherwise the checks of data only
// other objectives read, made before.
void check_data_format(const Recipe& r, const ObjectiveKind& kind, bool mine) {
  const std::string format = r.get_string("data.format"), &name = kind.name;
  if (!mine) {
    if (kind.data != ObjectiveData::pairs && format == "preference")
      r.fail("data.format", "preference pairs need a preference objective (objective.name: " + objective_names(ObjectiveData::pairs) +
                                "); this recipe's objective is " + name);
    if (kind.data != ObjectiveData::unpaired && format == "unpaired_preference")
      r.fail("data.format", "labelled completions need objective.name " + objective_names(ObjectiveData::unpaired) +
                                "; this recipe's objective is " + name);
    return;
  }
  if (kind.data == ObjectiveData::pairs && format != "preference")
    r.fail("data.format", "objective.name " + name + " learns from preference pairs: expected preference, found " + format);
  if (kind.data == ObjectiveData::unpaired && format != "unpaired_preference")
    r.fail("data.format", "objective.name " + name + " learns from labelled completions: expected unpaired_preference, found " + format);
  if (kind.data == ObjectiveData::prompts && format != "prompt")
    r.fail("data.format", "objective.name " + name + " samples completions of prompts: expected prompt, found " + format);
  if (kind.data != ObjectiveData::prompts && format == "prompt")
    r.fail("data.format", "prompts without responses train nothing except under online RL (objective.name: " +
                              objective_names(ObjectiveData::prompts) + "); this recipe's objective is " + name);
}

// The teacher's tokenizer is the run's: the same vocabulary, id for id (the divergence compares
// the two distributions token by token). Returns the first difference in words, or "".
std::string tokenizer_difference(const tok::Tokenizer& run, const tok::Tokenizer& teacher) {
  if (run.vocab_size() != teacher.vocab_size())
    return "it has " + std::to_string(teacher.vocab_size()) + " tokens, the run's " + std::to_string(run.vocab_size());
  for (std::size_t id = 0; id < run.vocab_size(); ++id) {
    const auto i = static_cast<std::int32_t>(id);
    if (run.id_to_token(i) != teacher.id_to_token(i))
      return "token " + std::to_string(id) + " is \"" + teacher.id_to_token(i) + "\" there and \"" + run.id_to_token(i) + "\" in the run's";
  }
  return "";
}

// objective.teacher: its config and weights checked against the student's vocabulary and the
// run's tokenizer (no weight is read), and how it is built.
void plan_teacher(RunPlan& p, const TeacherOptions& t) {
  const Recipe& r = p.recipe;
  const std::string key = "objective.teacher.path";
  RunPlan::Teacher teacher;
  teacher.config = for_key(r, key, [&] { return model::load_model_config(t.path); });
  if (teacher.config.vocab_size != p.model_config.vocab_size)
    r.fail(key, "the teacher's vocabulary has " + std::to_string(teacher.config.vocab_size) + " rows (config.json vocab_size), the student's " +
                    std::to_string(p.model_config.vocab_size) + ": distillation compares their next-token distributions token by token, so "
                    "both need the same tokenizer and vocabulary");
  teacher.spec.weights = t.path;
  // A frozen model needs no fp32 master: under mixed precision it is stored in the compute dtype.
  teacher.spec.storage_dtype = !t.dtype.empty() ? model::parse_dtype(t.dtype, "objective.teacher.dtype")
                                                : (p.compute_dtype != at::kFloat ? p.compute_dtype : p.model_dtype);
  teacher.spec.compute_dtype = p.compute_dtype;
  teacher.spec.device = p.device;
  if (t.quantize != kQuantNone) teacher.spec.quantize_base = quant_spec(r, "objective.teacher.quantize");
  model::CausalLM shape_only(teacher.config, teacher.spec.storage_dtype);
  teacher.parameters = model::parameter_shapes(*shape_only);
  for_key(r, key, [&] {
    io::CheckpointReader checkpoint(t.path);
    model::check_weights(shape_only, checkpoint);
  });
  if (p.tokenizer) {
    if (!tok::has_tokenizer(t.path))
      r.fail(key, "the teacher has no tokenizer (tokenizer.json or tokenizer.model) to check against the run's: distillation needs the same one");
    const auto theirs = for_key(r, key, [&] { return tok::load_tokenizer(t.path); });
    const std::string difference = tokenizer_difference(*p.tokenizer, *theirs);
    if (!difference.empty())
      r.fail(key, "the teacher's tokenizer is not the run's (" + difference + "): distillation needs the same tokenizer");
  }
  p.teacher = std::move(teacher);
}

// The objective (objective.*): its kind (train/objective/kind.h), its keys, and what it asks of
// the data and the method.
void plan_objective(RunPlan& p) {
  const Recipe& r = p.recipe;
  const ObjectiveKind& kind = objective_kind(r.get_string("objective.name"));
  refuse_keys_of_other_objectives(r, kind.name);
  check_data_format(r, kind, /*mine=*/false);
  p.objective = ObjectiveOptions(kind.name, kind.parse ? kind.parse(r) : nullptr);
  check_data_format(r, kind, /*mine=*/true);
  if (const auto generation = p.objective.generation()) check_share_prompt(generation->share_prompt, p.model_config);
  if (const TeacherOptions* teacher = p.objective.teacher()) plan_teacher(p, *teacher);
  const std::string reference_quantize = r.get_optional_string("objective.reference_quantize").value_or(kQuantNone);
  if (reference_quantize != kQuantNone) {
    if (p.method->freezes_base())
      r.fail("objective.reference_quantize", "under LoRA the reference is the base itself (adapters off): quantise it with memory.quantize_base");
    p.reference_quantize = quant_spec(r, "objective.reference_quantize");
  }
  if (p.objective.needs_reference() && p.method->freezes_base()) {
    // Under LoRA the reference is the base: the policy with its adapters off (so an adapter
    // given by peft.init_from is evaluated against the base; training one further is refused by
    // the session).
    if (r.get_bool("peft.train_router"))
      r.fail("peft.train_router", "objective.name " + kind.name + " takes the base (adapters off) as the reference, which trained routers would change");
  }
}

// Data: parsed, rendered, tokenized now, so a broken line stops the run before training.
void plan_data(RunPlan& p) {
  const Recipe& r = p.recipe;
  p.data = data_options(r, p.tokenizer_dir);
  if (p.scope == PlanScope::shapes && (!p.tokenizer || !fs::exists(p.data.train))) {
    if (p.tokenizer) spdlog::info("{}: no such file, so planned without data", p.data.train.string());
    return;
  }
  p.inputs = recipe_inputs(r);
  // Data errors name their own key or file:line; they only need the recipe in front.
  try {
    p.datasets = data::load_datasets(p.data, *p.tokenizer);
    // What the objective asks of the records (grpo: the fields its reward functions read; kto:
    // both labels).
    if (const auto check = p.objective.kind->check_records) check(*p.objective.own, p.datasets);
  } catch (const Error& e) {
    throw ConfigError(r.source() + ": " + e.what());
  }
}

// Optimizer, schedule, step counts, evaluation, checkpoints.
void plan_steps(RunPlan& p, const distributed::World& world) {
  const Recipe& r = p.recipe;
  p.optimizer.name = r.get_string("optimizer.name");
  p.optimizer.weight_decay = r.get_float("optimizer.weight_decay");
  const auto betas = r.get_floats("optimizer.betas");
  p.optimizer.beta1 = betas[0];
  p.optimizer.beta2 = betas[1];
  p.optimizer.eps = r.get_float("optimizer.eps");
  p.optimizer.momentum = r.get_float("optimizer.momentum");
  p.optimizer.decay_norms_and_biases = r.get_bool("optimizer.decay_norms_and_biases");

  auto& t = p.trainer;
  t.grad_accum = r.get_int("training.grad_accum");
  if (auto global = r.get_optional_int("training.global_batch_size");
      global && *global != r.get_int("training.batch_size") * t.grad_accum * world.size) {
    r.fail("training.global_batch_size", "is batch_size x grad_accum x ranks = " + std::to_string(r.get_int("training.batch_size")) + " x " +
                                             std::to_string(t.grad_accum) + " x " + std::to_string(world.size) + " = " +
                                             std::to_string(r.get_int("training.batch_size") * t.grad_accum * world.size) +
                                             " in this run, found " + std::to_string(*global) + " (leave it null unless training.batch_size is auto)");
  }
  p.distributed = distributed_plan(r);
  const bool data = p.datasets.train != nullptr;  // else a shapes plan without data: one step an epoch
  if (data) {
    const data::Sampler sampler(p.datasets.train, p.sampler_options());
    const auto batches = sampler.batches_per_epoch();
    if (p.data.packing) {
      p.packed_fill = static_cast<double>(sampler.plan().num_tokens()) /
                      static_cast<double>(std::max<std::int64_t>(1, sampler.plan().num_rows() * p.data.max_seq_len));
    }
    p.steps_per_epoch = std::max<std::int64_t>(1, (batches + t.grad_accum - 1) / t.grad_accum);
  } else {
    p.steps_per_epoch = 1;
  }
  const auto max_steps = r.get_optional_int("training.max_steps");
  const auto epochs = r.get_optional_int("training.epochs");
  if (max_steps && epochs) r.fail("training.epochs", "set training.max_steps or training.epochs, not both");
  if (!max_steps && !epochs) r.fail("training.max_steps", "set training.max_steps or training.epochs");
  t.max_steps = max_steps ? *max_steps : *epochs * p.steps_per_epoch;
  t.clip_grad_norm = r.get_optional_float("training.clip_grad_norm").value_or(0.0);
  t.eval_every = r.get_int("training.eval_every");
  t.log_every = r.get_int("logging.every_n_steps");
  p.tensorboard = r.get_bool("logging.tensorboard");
  p.profile = r.get_bool("logging.profile");
  p.samples_every = r.get_int("logging.samples_every_n_steps");
  t.chunked_loss = r.get_bool("memory.chunked_loss");
  t.aux_loss_coef = r.get_optional_float("moe.aux_loss_coef").value_or(p.model_config.arch.moe.router_aux_loss_coef);
  t.router_z_loss_coef = r.get_float("moe.router_z_loss_coef");
  t.max_nonfinite_steps = r.get_int("training.max_nonfinite_steps");
  t.device = p.device;
  if (auto n = r.get_optional_int("training.eval_batches")) p.eval_batches = *n;
  p.checkpoint.every_n_steps = r.get_int("checkpoint.every_n_steps");
  p.checkpoint.keep_last = r.get_int("checkpoint.keep_last");
  p.checkpoint.shard_bytes =
      io::parse_byte_size(r.get_string("checkpoint.shard_size"), r.origin("checkpoint.shard_size") + ": `checkpoint.shard_size`");
  // auto: each rank writes its part when the ranks hold different parts of the optimizer state.
  const std::string layout = r.get_string("checkpoint.layout");
  p.checkpoint.sharded = layout == "sharded" || (layout == "auto" && p.distributed.optimizer_shards(world) > 1);
  if (t.eval_every > 0 && data && p.datasets.eval->empty()) {
    r.fail("training.eval_every", "evaluation is requested but there is no eval data (set data.eval or data.eval_fraction)");
  }
  t.schedule.name = r.get_string("scheduler.name");
  t.schedule.peak_lr = r.get_float("optimizer.lr");
  t.schedule.warmup_steps = r.get_int("scheduler.warmup_steps");
  t.schedule.total_steps = t.max_steps;
  t.schedule.min_lr_ratio = r.get_float("scheduler.min_lr_ratio");
  if (t.schedule.warmup_steps >= t.max_steps && (data || max_steps)) {  // epochs without data: no step count
    r.fail("scheduler.warmup_steps", "warmup of " + std::to_string(t.schedule.warmup_steps) +
                                         " steps does not end before the run's " + std::to_string(t.max_steps) + " steps");
  }
}

// What the CUDA path does not do yet (docs/gpu.md): quantised bases (their kernels are the CPU's)
// and several processes (that needs NCCL).
void refuse_what_cuda_lacks(RunPlan& p, const distributed::World& world) {
  const Recipe& r = p.recipe;
  if (p.device.is_cuda() && p.quantize_base) {
    r.fail("memory.quantize_base", "int8 and nf4 bases run on the CPU only for now; with device: cuda use memory.quantize_base: none");
  }
  if (p.device.is_cuda() && world.distributed()) {
    r.fail("device", "several processes on cuda need the nccl backend, which is not implemented yet; train on one GPU (one process)");
  }
}

}  // namespace

RunPlan plan_run(Recipe recipe, const distributed::World& world, PlanScope scope) {
  RunPlan p;
  p.scope = scope;
  p.recipe = std::move(recipe);
  p.world = world;
  const Recipe& r = p.recipe;
  p.threads = parse_thread_count(r.get_string("threads"), "threads");
  // Ranks on one machine share its cores: "auto" gives each its share, so they do not contend.
  const std::string threads_value = r.get_string("threads");
  if (threads_value == "auto" && world.local_size > 1) p.threads = std::max(1, p.threads / world.local_size);
  p.seed = static_cast<std::uint64_t>(r.get_int("seed"));
  p.output_dir = r.get_string("output_dir");
  for (const auto& spec : recipe_schema()) {
    if (spec.planned && r.is_auto(spec.key))
      r.fail(spec.key, "auto is the planner's to resolve: run `ctune plan RECIPE --budget SIZE` (--write OUT.yaml), or `ctune train RECIPE --fit SIZE`");
  }

  {
    auto shape_only = plan_model(p);
    plan_method(p, shape_only);
  }  // the shape-only model is freed before the data is read
  plan_objective(p);
  plan_data(p);
  plan_steps(p, world);
  refuse_what_cuda_lacks(p, world);
  return p;
}

peft::ModelSpec RunPlan::model_spec(const fs::path& checkpoint) const {
  peft::ModelSpec base;
  base.weights = model_dir;
  base.storage_dtype = model_dtype;
  base.compute_dtype = compute_dtype;
  base.quantize_base = quantize_base;
  base.recompute = recompute;
  base.device = device;
  return method->model_spec(std::move(base), checkpoint);
}

model::CausalLM build_model(const RunPlan& plan, const fs::path& checkpoint) {
  return peft::build_model(plan.model_spec(checkpoint));
}

model::CausalLM build_reference(const RunPlan& plan) {
  if (!plan.objective.needs_reference() || plan.method->freezes_base()) return model::CausalLM(nullptr);  // LoRA: adapters off
  peft::ModelSpec spec = plan.model_spec();  // from model.path, never from a checkpoint: the reference does not train
  spec.quantize_base = plan.reference_quantize;
  auto reference = peft::build_model(spec);
  for (auto& p : reference->parameters()) p.requires_grad_(false);
  reference->eval();
  return reference;
}

model::CausalLM build_teacher(const RunPlan& plan) {
  if (!plan.teacher) return model::CausalLM(nullptr);
  auto teacher = peft::build_model(plan.teacher->spec);
  for (auto& p : teacher->parameters()) p.requires_grad_(false);
  teacher->eval();
  return teacher;
}

std::string RunPlan::recipe_yaml() const { return recipe.to_yaml(); }

data::SamplerOptions RunPlan::sampler_options() const {
  auto options = data::sampler_options(data, *tokenizer);
  options.batch.batch_size = data.batch_size * world.size;
  return options;
}

// The training rows one record gives whose activations backward needs (the ledger's B): a
// preference pair's two, a generating objective's group (grpo: num_generations), fewer when the
// objective scores some rows without gradients (kto: its KL rows).
static std::int64_t rows_per_record(const RunPlan& p) {
  const auto generation = p.objective.generation();
  const std::int64_t stated = p.objective.kind->gradient_rows_per_record;
  return (stated > 0 ? stated : data::examples_per_record(p.data.format)) * (generation ? generation->group : 1);
}

WeightFiles weight_files(const RunPlan& plan) { return {plan.model_dir, plan.tokenizer_dir, plan.checkpoint.shard_bytes}; }

RunWrites run_writes(const RunPlan& plan, const Ledger& ledger) {
  const std::int64_t weights = 4 * ledger.trainable_parameters + plan.method->weight_metadata_bytes(weight_files(plan));
  return {weights + ledger.optimizer_bytes_per_parameter * ledger.trainable_parameters, weights};
}

CheckpointSchedule checkpoint_schedule(const RunPlan& plan) {
  CheckpointSchedule s;
  s.max_steps = plan.trainer.max_steps;
  s.every_n_steps = plan.checkpoint.every_n_steps;
  s.keep_last = plan.checkpoint.keep_last;
  return s;
}

LedgerInputs ledger_inputs(const RunPlan& p, std::int64_t runtime_bytes) {
  LedgerInputs in;
  in.config = p.model_config;
  in.parameters = p.parameters;
  in.method = p.method;
  in.storage_dtype = p.model_dtype;
  in.compute_dtype = p.compute_dtype;
  in.quantize_base = p.quantize_base;
  in.recompute = p.recompute;
  in.chunked_loss = p.trainer.chunked_loss;
  in.router_z_loss = p.trainer.router_z_loss_coef > 0;
  in.batch_size = p.data.batch_size * rows_per_record(p);
  // Packed rows are filled to max_seq_len; unpacked ones are padded to their batch's longest
  // (data/batch.h), so the data's longest row bounds every batch.
  in.seq_len = p.data.max_seq_len;
  if (!p.data.packing && p.datasets.train) {
    std::int64_t longest = 1;
    for (const auto& e : *p.datasets.train) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(e.ids.size()));
    in.seq_len = std::min(in.seq_len, longest);
    in.seq_len_from_data = true;
  }
  // A generated row (grpo) is a prompt and a completion of up to max_new_tokens; the step's rows
  // are all generated in one batch before its first forward (train/objective/rollout.h).
  // With shared prompts (train/objective/shared_prompt.h, decided here at the longest prompt
  // and completion) a group is one row of the prompt and every completion after it.
  if (const auto generation = p.objective.generation()) {
    const std::int64_t G = generation->group, prompt = in.seq_len, completion = generation->new_tokens;
    in.prompt_tokens = prompt;
    in.new_tokens = completion;
    in.generated_rows = in.batch_size * (generation->per_micro_batch ? 1 : p.trainer.grad_accum);
    in.generated_prompts = in.generated_rows / G;
    in.kept_logps = generation->kept_logps;
    const RowShape separate{in.batch_size, prompt + completion}, shared{in.batch_size / G, prompt - 1 + G * (completion + 1)};
    in.shared_prompt = share_prompts_here(generation->share_prompt, p.model_config, separate, shared);
    in.batch_size = in.shared_prompt ? shared.rows : separate.rows;
    in.seq_len = in.shared_prompt ? shared.length : separate.length;
    in.kept_rows = generation->per_micro_batch ? 0 : in.batch_size * p.trainer.grad_accum;
  }
  if (p.objective.needs_reference() && !p.method->freezes_base() && !p.objective.precomputes_reference()) {
    // The frozen copy is built as the policy's weights are stored (train/run/run_plan.h build_reference);
    // precomputed log-probabilities free it before training.
    in.reference = frozen_copy_bytes(p.parameters, p.model_dtype, p.reference_quantize);
  }
  if (p.teacher) {
    in.teacher = frozen_copy_bytes(p.teacher->parameters, p.teacher->spec.storage_dtype, p.teacher->spec.quantize_base);
    in.teacher_hidden = p.teacher->config.hidden_size;
    in.teacher_intermediate = p.teacher->config.mlp_width();
  }
  in.grad_accum = p.trainer.grad_accum;
  in.optimizer = p.optimizer.name;
  in.optimizer_shards = p.distributed.optimizer_shards(p.world);
  in.parameter_shards = p.distributed.parameter_shards(p.world);
  in.all_reduced_gradients = p.world.size > 1 && in.optimizer_shards == 1 && in.parameter_shards == 1;
  in.sharded_checkpoints = p.checkpoint.sharded;
  in.cpu_offload = p.distributed.cpu_offload;
  in.fused_optimizer = ops::fused_optimizer_on(p.distributed.cpu_offload ? at::Device(at::kCPU) : p.device);
  in.prefetch = p.distributed.prefetch;
  in.momentum = p.optimizer.momentum;
  in.runtime_bytes = runtime_bytes;
  in.step_runtime_bytes = ops::step_runtime_bytes(p.device.is_cpu(), p.threads);
  in.gemm_in_fp32 = p.compute_dtype != at::kFloat && ops::gemm_in_fp32(p.compute_dtype, p.device);
  in.exact_allocator = p.exact_allocator;
  // The attention runs in the matmul dtype (the ledger's c): the compute dtype, or under fp32
  // precision the weights' storage dtype.
  const auto attention_dtype = p.compute_dtype != at::kFloat ? p.compute_dtype : p.model_dtype;
  in.threads = p.threads;
  in.fp32_weight_grads = ops::cpu_gemm::fp32_weight_grads(p.device, p.compute_dtype);
  in.gated_delta_kernel = p.model_config.arch.linear.any() && ops::gated_delta_kernel_applies(p.device);
  in.tiled_attention = ops::tiled_attention_applies(p.device, attention_dtype, in.batch_size * p.model_config.num_key_value_heads, p.threads);
  in.tiled_prefill = in.recompute.blocked_attention &&
                     ops::tiled_attention_applies(p.device, attention_dtype, in.generated_prompts * p.model_config.num_key_value_heads, p.threads);
  if (p.model_config.arch.moe.experts > 0) {
    in.padded_expert_rows = model::pads_expert_rows(p.device, p.compute_dtype);
    in.kernel_cache_bytes = ops::gemm_kernel_cache_bytes(p.device, p.compute_dtype);
  }
  return in;
}

std::vector<std::string> Techniques::overrides() const {
  return {"precision=" + precision,
          "peft.method=" + method,
          "memory.quantize_base=" + quantize_base,
          "memory.activation_checkpointing=" + checkpointing,
          "training.batch_size=" + std::to_string(batch_size),
          "training.grad_accum=" + std::to_string(grad_accum),
          std::string("memory.chunked_loss=") + (chunked_loss ? "true" : "false"),
          "distributed.strategy=" + strategy,
          std::string("distributed.cpu_offload=") + (cpu_offload ? "true" : "false")};
}

LedgerInputs ledger_inputs(const RunPlan& p, std::int64_t runtime_bytes, const Techniques& t, std::shared_ptr<const Method> method) {
  LedgerInputs in = ledger_inputs(p, runtime_bytes);
  const Recipe& r = p.recipe;
  // As plan_method resolves them.
  in.method = std::move(method);
  in.compute_dtype = model::parse_dtype(t.precision, "precision");
  in.storage_dtype = in.method->storage_dtype(model::parse_dtype(r.get_string("model.dtype"), "model.dtype"), in.compute_dtype);
  in.quantize_base.reset();
  if (t.quantize_base != kQuantNone) {
    if (!in.method->freezes_base()) throw ConfigError("a quantised base needs LoRA");
    in.quantize_base = quant_spec(r.with({"memory.quantize_base=" + t.quantize_base}));  // the recipe's int8/nf4 settings
  }
  const bool blocked = in.recompute.blocked_attention;
  in.recompute = model::RecomputePolicy::parse(t.checkpointing);
  in.recompute.blocked_attention = blocked;
  // As plan_steps and ledger_inputs(plan) do.
  in.chunked_loss = t.chunked_loss;
  in.batch_size = t.batch_size * rows_per_record(p);
  in.grad_accum = t.grad_accum;
  DistributedPlan d = p.distributed;
  d.strategy = t.strategy;
  d.cpu_offload = t.cpu_offload;
  if (d.cpu_offload && d.strategy != "full_shard" && d.strategy != "hybrid_shard") throw ConfigError("offload needs parameter shards");
  in.optimizer_shards = d.optimizer_shards(p.world);
  in.parameter_shards = d.parameter_shards(p.world);
  in.all_reduced_gradients = p.world.size > 1 && in.optimizer_shards == 1 && in.parameter_shards == 1;
  in.cpu_offload = d.cpu_offload;
  in.fused_optimizer = ops::fused_optimizer_on(d.cpu_offload ? at::Device(at::kCPU) : p.device);
  const std::string layout = r.get_string("checkpoint.layout");
  in.sharded_checkpoints = layout == "sharded" || (layout == "auto" && in.optimizer_shards > 1);
  in.reference = {};
  if (p.objective.needs_reference() && !in.method->freezes_base() && !p.objective.precomputes_reference())
    in.reference = frozen_copy_bytes(p.parameters, in.storage_dtype, p.reference_quantize);
  return in;
}

std::string RunPlan::summary() const {
  std::ostringstream s;
  const auto& c = model_config;
  s << "model        " << model_dir.string() << " (" << c.model_type << ", " << c.num_hidden_layers << " layers, hidden "
    << c.hidden_size << ", " << model::parameter_count(parameters) << " parameters, " << model::dtype_to_hf(model_dtype) << ")\n";
  s << "tokenizer    " << tokenizer_dir.string() << " (" << tokenizer->kind() << ", " << tokenizer->vocab_size()
    << " tokens)\n";
  s << "method       " << method->describe() << "\n";
  const auto& ts = datasets.train_stats;
  // A preference record is a pair of examples, an unpaired one a completion and its KL row.
  const std::int64_t per_record = data::examples_per_record(data.format);
  const std::string unit = data.format == data::DataFormat::unpaired_preference ? " labelled completions" : per_record == 2 ? " pairs" : " examples";
  auto count = [&](const data::Examples& ex) { return std::to_string(static_cast<std::int64_t>(ex->size()) / per_record) + unit; };
  s << "train data   " << ts.file << ": " << count(datasets.train) << ", " << ts.tokens << " tokens (" << ts.target_tokens << " trained)";
  if (ts.skipped) s << ", " << ts.skipped << " malformed records skipped";
  if (ts.truncated) s << ", " << ts.truncated << " truncated";
  if (ts.dropped) s << ", " << ts.dropped << " dropped (nothing left to train)";
  if (ts.too_long) s << ", " << ts.too_long << " dropped as longer than data.max_seq_len";
  if (ts.identical) s << ", " << ts.identical << " pairs dropped (chosen and rejected the same)";
  s << "\n";
  s << "eval data    " << (datasets.eval->empty() ? std::string("none") : count(datasets.eval)) << "\n";
  if (const auto settings = objective.kind->summary) {
    s << "objective    " << objective.name() << " (" << settings(*objective.own)
      << (objective.needs_reference() ? std::string("; reference: ") + (method->freezes_base() ? "the base, adapters off" : "a frozen copy of model.path") +
                                            (objective.precomputes_reference() ? ", precomputed" : "")
                                      : "; no reference")
      << ")\n";
  }
  s << "steps        " << trainer.max_steps << " (" << steps_per_epoch << " per epoch, batch "
    << data.batch_size << " x accumulation " << trainer.grad_accum;
  if (data.packing) {
    char fill[96];
    std::snprintf(fill, sizeof fill, ", packed rows %.1f%% full%s", 100.0 * packed_fill,
                  data.packing_split ? ", documents split" : data.packing_window > 0 ? ", bin-packed" : "");
    s << fill;
  }
  s << ")\n";
  if (world.distributed()) {
    s << "ranks        " << world.size << " (" << world.nodes() << " node" << (world.nodes() > 1 ? "s" : "") << ", "
      << distributed.strategy << (distributed.cpu_offload ? " with CPU offload" : "") << " over " << distributed.backend << "; global batch " << data.batch_size * world.size << " x "
      << trainer.grad_accum << " rows)\n";
  }
  s << "checkpoints  " << (checkpoint.every_n_steps > 0 ? "every " + std::to_string(checkpoint.every_n_steps) + " steps" : std::string("at the end"))
    << ", keep " << checkpoint.keep_last << ", "
    << (checkpoint.sharded ? "sharded (each rank writes its part; ctune consolidate makes one whole)" : "whole") << "\n";
  s << "precision    " << model::dtype_to_hf(compute_dtype) << " matmuls"
    << (compute_dtype != at::kFloat ? ", fp32 master weights" + std::string(loss_scaling.enabled ? ", dynamic loss scaling" : "")
                                    : std::string())
    << (compute_dtype != at::kFloat && ops::gemm_in_fp32(compute_dtype, device)
            ? " (this CPU has no " + model::dtype_to_hf(compute_dtype) +
                  " GEMM: each product runs in fp32 on the rounded operands and rounds once; docs/performance.md)"
            : std::string())
    << "\n";
  s << "optimizer    " << optimizer.name << " lr " << trainer.schedule.peak_lr << ", " << trainer.schedule.name
    << " schedule, warmup " << trainer.schedule.warmup_steps << "\n";
  s << "output       " << output_dir.string() << "\n";
  return s.str();
}

}  // namespace ctune::train
