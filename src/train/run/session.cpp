#include "train/run/session.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <spdlog/sinks/basic_file_sink.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/stop_signal.h"
#include "data/chat_format.h"
#include "io/file.h"
#include "io/manifest.h"
#include "io/run_dir.h"
#include "io/run_layout.h"
#include "model/config.h"
#include "ops/memory.h"
#include "ops/memory_phase.h"
#include "ops/tensor_pool.h"
#include "ops/threads.h"
#include "train/forecast/disk_need.h"
#include "train/forecast/memory_report.h"
#include "train/objective/objectives.h"
#include "train/objective/reward_command.h"
#include "train/observe/metrics.h"
#include "train/parallel/data_parallel.h"
#include "train/run/checkpoint_cadence.h"
#include "train/step/batches.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

// Logs go to output_dir/train.log as well as stderr; step lines go to the file only.
void log_to_run_dir(const fs::path& dir) {
  std::fclose(io::open_for_append(dir / io::kTrainLog));  // created here, never through a link
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((dir / io::kTrainLog).string());
  spdlog::default_logger()->sinks().push_back(file);
  auto train_log = std::make_shared<spdlog::logger>("train", file);
  train_log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %v");
  train_log->flush_on(spdlog::level::info);
  spdlog::register_logger(train_log);
  spdlog::default_logger()->flush_on(spdlog::level::info);
}

void log_trainable(const peft::LoraSummary& counts) {
  spdlog::info("trainable parameters {} of {} ({:.4f}%)", counts.trainable, counts.total,
               100.0 * static_cast<double>(counts.trainable) / static_cast<double>(std::max<std::int64_t>(1, counts.total)));
}

// The parameters that train, by name, for the optimizer's groups.
std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(model::CausalLM& lm) {
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true))
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  return trainable;
}

void log_done(const TrainResult& result) {
  if (result.skipped_steps > 0) spdlog::info("{} steps were skipped (non-finite loss or gradients)", result.skipped_steps);
  spdlog::info("done: {} steps in {:.1f} s, last loss {:.4f}{}", result.steps, result.seconds, result.last_loss,
               result.final_eval_loss ? fmt::format(", eval loss {:.4f}", *result.final_eval_loss) : std::string());
}

// Each line of `text`, the last one included whether or not a newline ends it.
void log_lines(const std::string& text) {
  std::size_t pos = 0;
  for (std::size_t end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    spdlog::info("{}", text.substr(pos, end - pos));
  }
  if (pos < text.size()) spdlog::info("{}", text.substr(pos));
}

}  // namespace

Session::Session(RunPlan plan, SessionOptions options, distributed::Comm& comm)
    : plan_(std::move(plan)), options_(std::move(options)), comm_(comm) {
  if (options_.resume && options_.overwrite) throw ConfigError("--resume and --overwrite exclude each other");
  if (plan_.objective.needs_reference() && plan_.method->freezes_base() && plan_.continues_adapter) {
    // The reference under LoRA is the base (adapters off), not the adapter this run starts from.
    throw ConfigError("peft.init_from: objective.name " + plan_.objective.name() +
                      " with LoRA compares the adapter with the base (adapters off); training an existing adapter further would "
                      "need that adapter as the reference, which is not implemented (merge it into the base first: ctune merge)");
  }
  if (writer()) check_run_dir();
}

// Where results may go, in every mode: see session.h.
void Session::check_run_dir() const {
  const fs::path& dir = plan_.output_dir;
  io::refuse_unsafe_output(dir, "output_dir", plan_.inputs);
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  bool empty = true;  // nothing but our own lock file
  for (const auto& e : fs::directory_iterator(dir, ec)) empty = empty && e.path().filename() == io::kLockFile;
  if (exists && !fs::is_directory(dir, ec)) throw ConfigError("output_dir " + dir.string() + ": exists and is not a directory");
  if (options_.resume) {
    if (!exists) throw ConfigError("--resume: output_dir " + dir.string() + " does not exist");
    if (!io::is_run_dir(dir)) throw ConfigError("--resume: output_dir " + dir.string() + " is not a ctune run directory (no " + io::kRunMarker + ")");
  } else if (!empty) {
    if (!options_.overwrite) {
      throw ConfigError("output_dir " + dir.string() +
                        " already holds files (pass --resume to continue that run, --overwrite to replace it)");
    }
    if (!io::is_run_dir(dir)) {
      throw ConfigError("output_dir " + dir.string() + " is not empty and is not a ctune run directory (no " + io::kRunMarker +
                        "); --overwrite only replaces an earlier run");
    }
  }
}

// What this run reads, as checkpoints record it: absolute path and content fingerprint.
Json Session::input_identities() const {
  Json out = Json::object();
  for (const auto& [name, path] : plan_.inputs) {
    out[name] = {{"path", fs::absolute(path).lexically_normal().string()}, {"fingerprint", io::input_fingerprint(path)}};
  }
  return out;
}

// A checkpoint continues only the run that read the same inputs: same content (fingerprint),
// and the same paths unless the user says the files moved.
void Session::check_inputs(const Json& recorded, const Json& now, const fs::path& checkpoint) const {
  for (auto it = recorded.begin(); it != recorded.end(); ++it) {
    const std::string& name = it.key();
    const std::string then_path = it->value("path", ""), then_print = it->value("fingerprint", "");
    if (!now.contains(name)) {
      throw ConfigError("--resume: the checkpoint " + checkpoint.string() + " was trained with " + name + " " + then_path +
                        ", which this recipe does not set");
    }
    const std::string now_path = now[name]["path"], now_print = now[name]["fingerprint"];
    if (now_print != then_print) {
      throw ConfigError("--resume: " + name + " " + now_path + " holds other content than the checkpoint was trained on (" +
                        then_path + ", fingerprint " + then_print + "; now " + now_print + "); start a new run instead");
    }
    if (now_path != then_path && !options_.inputs_moved) {
      throw ConfigError("--resume: " + name + " is " + now_path + " but the checkpoint was trained on " + then_path +
                        " (same content); pass --inputs-moved if the files were moved");
    }
    if (now_path != then_path) spdlog::info("note: {} moved from {} to {} (same content)", name, then_path, now_path);
  }
}

// What the run runs beside itself (a reward program), as checkpoints record it.
Json Session::program_identities() const {
  const ObjectiveOptions& o = plan_.objective;
  return o.kind->programs ? o.kind->programs(*o.own) : Json::object();
}

// A reward program that changed since the checkpoint is worth a line, not a refusal: fixing a
// grader and resuming is what a user wants, but the steps before were scored by the old one.
void Session::warn_if_programs_changed(const Json& recorded, const Json& now, const fs::path& checkpoint) const {
  for (auto it = recorded.begin(); it != recorded.end(); ++it) {
    const std::string change = reward_program_change(it.value(), now.value(it.key(), Json::object()));
    if (!change.empty())
      spdlog::warn("--resume: {} is not what the run of {} ran: {}; its rewards from here on may differ from the steps before", it.key(),
                   checkpoint.string(), change);
  }
}

std::optional<fs::path> Session::find_resume_point() const {
  if (!options_.resume_from.empty()) {
    const std::string problem = verify_checkpoint(options_.resume_from);
    if (!problem.empty()) throw ConfigError("--resume " + options_.resume_from.string() + ": not a usable checkpoint: " + problem);
    return options_.resume_from;
  }
  std::vector<std::string> skipped;
  auto latest = CheckpointManager(plan_.output_dir, 1).latest(&skipped);
  for (const auto& s : skipped) spdlog::warn("skipping checkpoint {}", s);
  if (!latest) spdlog::warn("no complete checkpoint in {}: starting from the beginning", (plan_.output_dir / io::kCheckpointsDir).string());
  return latest;
}

// The run directory, locked: fresh, explicitly replaced (an earlier run's files removed), or the
// run being resumed (cut back to the checkpoint, and the resume recorded in the run marker).
// Mixing two runs' metrics is never right.
void Session::prepare_run_dir(const std::optional<fs::path>& resume_dir, std::int64_t resumed_step) {
  const fs::path& dir = plan_.output_dir;
  std::error_code ec;
  std::vector<io::ResumeRecord> resumes;
  if (options_.resume) {
    truncate_metrics(dir, resumed_step);
    resumes = io::read_resume_records(dir);
    if (resume_dir) resumes.push_back({resumed_step, fs::absolute(*resume_dir).lexically_normal().string(), unix_seconds()});
  } else {
    for (const auto& name : io::run_outputs()) fs::remove_all(dir / name, ec);
  }
  io::mark_run_dir(dir, resumes);
}

// 1. The process: threads, denormals, allocator, RNG. Denormal floats make x86 arithmetic up to
//    100x slower; they appear once optimizer state and gradients hold tiny values. Flush them to
//    zero (FTZ/DAZ), as torch.set_flush_denormal(True).
void Session::start_process() const {
  ops::use_threads(plan_.threads);
  at::globalContext().setFlushDenormal(true);
  ops::use_allocator(plan_.exact_allocator);
  if (plan_.memory_limit > 0) ops::set_memory_limit(plan_.device, plan_.memory_limit);
  at::manual_seed(plan_.seed);
  install_stop_handlers();
}

// Without memory.limit nothing stops a CPU run at the machine's memory: Linux overcommits, and
// the OOM killer ends the process (or another one) with SIGKILL, minutes into loading a model
// too large. The ledger knows before: a predicted peak past what the process can hold (the
// machine's memory, its cgroup's limit, ulimit -v; a GPU's memory) ends the run now, in the
// same one line as running out would, with the plan that fits added by `ctune train`
// (docs/planning.md, "Running out of memory"). memory.limit, the user's own budget, is held as
// the run goes.
void Session::refuse_what_cannot_fit(const Ledger& ledger) const {
  OutOfMemoryFacts facts = out_of_memory_facts(plan_.device, 0, &ledger, plan_.world.local_size);
  if (plan_.device.is_cpu()) hold_to_address_space(facts);
  if (facts.capacity <= 0 || ledger.peak_bytes <= facts.capacity) return;
  facts.phase = "before loading the model";
  facts.predicted_only = true;
  throw OutOfMemory(std::move(facts));
}

// Under ulimit -v what must fit is address space, of which the ledger's resident bytes are only
// a part: what is mapped now (the libraries, the compute runtimes' reservations made by
// ops::use_threads) and the model's weight files, mapped as it loads, stand beside the run's
// tensors. The capacity a plan must fit is the limit less those (in the ledger's terms: its
// runtime line, what is resident now, is already part of what is mapped). Counting the limit
// as resident memory let runs through that then failed in OpenBLAS's allocation retry loop.
void Session::hold_to_address_space(OutOfMemoryFacts& facts) const {
  const auto limit = ops::address_space_limit();
  if (!limit) return;
  std::int64_t files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(plan_.model_dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") files += static_cast<std::int64_t>(e.file_size(ec));
  const std::int64_t beside = ops::mapped_bytes() - facts.runtime + files;
  const std::int64_t capacity = *limit - beside;
  if (capacity >= facts.capacity) return;
  facts.capacity = capacity;
  facts.capacity_source = std::string(ops::kAddressSpaceLimit) + " less the " + format_bytes(beside) +
                          " mapped beside the run's memory (libraries, thread buffers, the model's files)";
}

// A run whose checkpoints or result cannot fit the disk would fail at its first checkpoint that
// does not, after every step since the one before (docs/planning.md, "Running out of disk").
// What --overwrite is about to remove counts as free.
std::string Session::refuse_what_cannot_be_written(std::int64_t resumed) const {
  const RunWrites writes = run_writes(plan_, *ledger_);
  CheckpointSchedule schedule = checkpoint_schedule(plan_);
  schedule.first_step = std::max<std::int64_t>(0, resumed);
  schedule.protects_one = resumed >= 0;
  const fs::path& dir = plan_.output_dir;
  std::int64_t free = free_bytes_at(dir);
  std::error_code ec;
  if (options_.resume) {
    for (const auto& e : fs::directory_iterator(CheckpointManager::dir_for(dir, 0).parent_path(), ec))
      if (io::checkpoint_step(e.path()) >= 0) ++schedule.existing;
  } else if (free >= 0) {
    for (const auto& name : io::run_outputs()) free += bytes_under(dir / name);
  }
  const DiskNeed need = train::refuse_what_cannot_be_written(dir, writes, schedule, free);
  return "disk         " + describe(writes, need) + (free >= 0 ? ", of " + format_bytes(free) + " free" : std::string());
}

// 2. The run directory, locked for this process; where the run stands: a checkpoint to resume
//    from (after every check), and the directory to match. Rank 0 owns the directory; the other
//    ranks only read checkpoints, and log warnings and errors (their progress lines would repeat
//    rank 0's).
Session::ResumePoint Session::open_run_dir(std::optional<io::DirLock>& lock, const Json& inputs, const Json& programs) {
  std::string disk;  // what the run writes against what is free: logged with the plan
  if (writer()) {
    if (!options_.resume) disk = refuse_what_cannot_be_written(-1);  // before the directory is made
    std::error_code ec;
    fs::create_directories(plan_.output_dir, ec);
    if (ec) throw IoError(plan_.output_dir.string() + ": cannot create directory (" + ec.message() + ")");
    lock.emplace(plan_.output_dir, "output_dir");
    check_run_dir();  // again, now that no other writer can change the directory
  } else {
    spdlog::set_level(std::max(spdlog::default_logger()->level(), spdlog::level::warn));
  }
  ResumePoint at;
  if (options_.resume) {
    at.dir = find_resume_point();
    if (at.dir) {
      at.state = read_training_state(*at.dir);
      const bool identities = at.state->inputs.is_object();
      if (identities) {
        check_inputs(at.state->inputs, inputs, *at.dir);
      } else {
        spdlog::warn("{} records no input identities (an older checkpoint): only the recipe is compared", at.dir->string());
      }
      const auto notes = check_resume_compatible(plan_, at.state->recipe_yaml, (*at.dir / io::kRecipeFile).string(), at.state->step,
                                                 identities, at.state->sampler.batch_size);
      for (const auto& note : notes) spdlog::info("note: {}", note);
      verify_run_files(at);
      if (writer()) warn_if_programs_changed(at.state->programs, programs, *at.dir);
    }
    if (writer()) disk = refuse_what_cannot_be_written(at.state ? at.state->step : -1);
  }
  if (writer()) {
    prepare_run_dir(at.dir, at.state ? at.state->step : 0);
    log_to_run_dir(plan_.output_dir);
    io::write_file_atomic(plan_.output_dir / io::kRecipeFile, plan_.recipe_yaml());
    log_lines(plan_.summary());
    spdlog::info("{}", disk);
  }
  comm_.barrier("waiting for rank 0 to prepare output_dir");
  return at;
}

// Running out of memory anywhere in the run ends it with one line: the phase, what was in use,
// the ledger's prediction (`ctune train` adds the plan that would fit).
TrainResult Session::run() {
  try {
    return run_steps();
  } catch (const c10::OutOfMemoryError&) {
    throw OutOfMemory(out_of_memory_facts(plan_.device, plan_.memory_limit, ledger_ ? &*ledger_ : nullptr, plan_.world.local_size));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(out_of_memory_facts(plan_.device, plan_.memory_limit, ledger_ ? &*ledger_ : nullptr, plan_.world.local_size));
  }
}

TrainResult Session::run_steps() {
  RunPlan& plan = plan_;
  start_process();  // 1.
  //    The memory the run should take, and whether it can: a run predicted past what this
  //    process can hold is refused before it makes its directory or reads its model.
  const auto& ledger = ledger_.emplace(estimate_memory(ledger_inputs(plan, ops::memory_now(plan.device))));
  refuse_what_cannot_fit(ledger);
  std::optional<io::DirLock> lock;
  const Json inputs = input_identities(), programs = program_identities();
  ResumePoint resume = open_run_dir(lock, inputs, programs);  // 2.

  // 3. Model (from the checkpoint when resuming), what trains, optimizer.
  //    A sharded checkpoint's weights are slices: the model is built from model.path and each
  //    trainable parameter filled from them (any world size wrote them).
  const bool from_shards = resume.dir && is_sharded_checkpoint(*resume.dir);
  std::optional<ops::MemoryPhase> loading(std::in_place, "loading the model");
  auto lm = build_model(plan, from_shards ? fs::path() : resume.dir.value_or(fs::path()));
  const auto counts = plan.method->make_trainable(lm);
  if (from_shards) ShardedState(*resume.dir).load_weights_into(lm);
  spdlog::debug("resident {:.1f} MB after the model is built", static_cast<double>(ops::resident_bytes()) / 1e6);
  log_trainable(counts);
  //    The optimizer and how the ranks agree each step follow distributed.strategy.
  auto parallel = make_data_parallel(plan.distributed, lm, make_param_groups(trainable_parameters(lm), plan.optimizer), plan.optimizer, comm_);
  auto& optimizer = parallel.optimizer;
  loading.reset();

  // 4. Data. The sampler yields global batches; each rank trains on its rows and evaluates its
  //    share of the eval batches (a world of one: all of them). An objective with batches of its
  //    own (grpo: completions it samples of the sampler's prompts) trains and evaluates on those.
  data::Sampler sampler(plan.datasets.train, plan.sampler_options());
  //    The reference the objective compares with (none under LoRA, and none kept when its
  //    log-probabilities are precomputed: that pass builds its own copy and frees it), laid out
  //    as the policy is.
  const ObjectiveKind& kind = *plan.objective.kind;
  auto reference = plan.objective.precomputes_reference() ? model::CausalLM(nullptr) : build_reference(plan);
  parallel.shard_like_policy(reference);
  //    A distilling objective's teacher: whole on every rank (another model's shapes).
  auto teacher = build_teacher(plan);
  std::optional<SourceContext> context;  // what the objective's own sources draw on
  if (kind.batch_source || kind.eval_source) context.emplace(source_context(lm, reference, sampler, resume, parallel));
  if (context) context->teacher = teacher;
  const auto own_source = kind.batch_source ? kind.batch_source(*plan.objective.own, *context) : nullptr;
  const auto rows = own_source ? nullptr : std::make_unique<RankRows>(sampler, comm_.rank(), comm_.size(), plan.device);
  BatchSource& source = own_source ? *own_source : static_cast<BatchSource&>(*rows);
  spdlog::debug("resident {:.1f} MB with optimizer and data", static_cast<double>(ops::resident_bytes()) / 1e6);
  const auto eval_source = kind.eval_source ? kind.eval_source(*plan.objective.own, *context) : nullptr;
  std::vector<TensorBatch> eval = kind.eval_source ? std::vector<TensorBatch>() : fixed_eval_batches();

  // 5. Where the checkpoint left off: step, optimizer, loss scale, data cursor, RNG.
  GradScaler scaler(plan.loss_scaling);
  if (resume.state) restore_state(resume, *optimizer, scaler, sampler);

  // 6. Train (metrics are rank 0's), checkpointing on cadence, at a stop and at the end.
  CheckpointManager checkpoints(plan.output_dir, plan.checkpoint.keep_last);
  if (resume.dir) checkpoints.protect(*resume.dir);
  if (writer()) checkpoints.apply_retention();
  const WeightFiles files = weight_files(plan);
  CheckpointSources sources = checkpoint_sources(lm, files, sampler, scaler, inputs, programs, own_source.get());
  CheckpointCadence cadence(plan, checkpoints, sources, parallel, lm, comm_, resume.state ? resume.state->step : -1);
  std::optional<MetricsLog> metrics;
  if (writer()) metrics.emplace(plan.output_dir, plan.tensorboard);
  Trainer trainer(lm, *optimizer, source, std::move(eval), plan.trainer, metrics ? &*metrics : nullptr);
  //    The objective; with precomputed reference log-probabilities no reference is kept.
  const auto table = plan.objective.precomputes_reference() ? precomputed_reference(lm, parallel, resume) : nullptr;
  if (table && writer()) sources.run_files = {io::manifest_entry(plan.output_dir, io::kReferenceLogps)};
  trainer.objective = make_objective(plan.objective, plan.trainer.chunked_loss, reference, table, teacher);
  trainer.scaler = &scaler;
  trainer.step_sync = parallel.sync.get();
  trainer.eval_source = eval_source.get();
  StateMeter meter(lm, *optimizer);
  trainer.sample_memory = [&] { meter.sample(); };
  parallel.sample_memory_with(trainer.sample_memory);
  trainer.on_step_end = [&](std::int64_t step) {
    if (writer() && own_source) write_samples(*own_source, step);
    cadence.after_step(step);
  };
  //    logging.profile: rank 0 times its steps; the second and third go to a trace (the first warms up).
  std::optional<StepProfiler> profiler;
  if (plan.profile && writer()) {
    const std::int64_t first = plan.trainer.first_step + 2;
    profiler.emplace(plan.output_dir / io::kProfileTrace, first, 2);
    trainer.profiler = &*profiler;
  }
  trainer.on_stop = [&](std::int64_t step, int signal) { stop_after(cadence, step, signal); };
  ops::release_free_memory();  // what loading freed goes back: the pool's bound is the step's (ops/tensor_pool.h)
  const auto start_bytes = ops::memory_now(plan.device);
  ops::reset_peak_memory(plan.device);  // the measured peak is training's, not loading's
  const double communicating_before = comm_.seconds_communicating();
  const auto result = trainer.run();
  if (profiler) {
    profiler->finish();
    log_lines(profiler->table());
  }
  std::optional<Json> memory_record;
  if (metrics) memory_record = report_memory(ledger, start_bytes, meter, plan.device);
  log_communication(communicating_before, result);
  refuse_if_nothing_learned(result);
  {
    const ops::MemoryPhase phase("checkpoint");
    cadence.ensure(plan.trainer.max_steps);
  }

  // 7. The result, in the ecosystem's layouts: output_dir/model or output_dir/adapter.
  write_result(lm, parallel, files);
  report_run_peak(ledger, memory_record, metrics ? &*metrics : nullptr);
  cadence.write_report();
  log_done(result);
  return result;
}

// The eval split's batches, this rank's share, made once (an objective without an eval source
// of its own evaluates on these).
std::vector<TensorBatch> Session::fixed_eval_batches() const {
  return rank_share(all_batches(data::sequential_plan(*plan_.datasets.eval, data::batch_options(plan_.data, *plan_.tokenizer)),
                                plan_.eval_batches, plan_.device, /*eval_split=*/true),
                    comm_.rank(), comm_.size());
}

// What the checkpoint resumed from holds, put back; the trainer starts after its step.
void Session::restore_state(const ResumePoint& resume, Optimizer& optimizer, GradScaler& scaler, data::Sampler& sampler) {
  plan_.trainer.first_step = resume.state->step;
  optimizer.load_state(resume.state->optimizer);
  if (resume.state->scaler) scaler.load_state(*resume.state->scaler);
  sampler.restore(resume.state->sampler);
  restore_rng(resume.state->rng);
  spdlog::info("resumed from {} at step {}", resume.dir->string(), resume.state->step);
}

// What the run's checkpoints are written from; the optimizer's and batch source's state are
// taken at each checkpoint (train/run/checkpoint_cadence.h).
CheckpointSources Session::checkpoint_sources(model::CausalLM& lm, const WeightFiles& files, const data::Sampler& sampler,
                                              const GradScaler& scaler, const Json& inputs, const Json& programs,
                                              const BatchSource* own_source) const {
  CheckpointSources sources;
  sources.model = lm;
  sources.method = plan_.method.get();
  sources.files = files;
  sources.sampler = &sampler;
  sources.recipe_yaml = plan_.recipe_yaml();
  sources.scaler = &scaler;
  sources.inputs = inputs;
  sources.source = own_source;  // several ranks: each rank's batches, gathered for the checkpoint
  sources.programs = programs;
  return sources;
}

// Stopped by a signal after `step` (every rank after the same one): save it, so --resume
// continues exactly here.
void Session::stop_after(CheckpointCadence& cadence, std::int64_t step, int signal) const {
  cadence.ensure(step);
  const std::string line = signal_name(signal) + " after step " + std::to_string(step) + " of " + std::to_string(plan_.trainer.max_steps) +
                           ": checkpoint " + CheckpointManager::dir_for(plan_.output_dir, step).string() + " written; continue with --resume";
  spdlog::warn("stopped by {}", line);
  throw StoppedError(signal, line);
}

// Several ranks: rank 0's time in collectives while training.
void Session::log_communication(double seconds_before, const TrainResult& result) const {
  if (!plan_.world.distributed()) return;
  const double waited = comm_.seconds_communicating() - seconds_before;
  spdlog::info("communication: rank 0 spent {:.2f} s of {:.2f} s training in collectives ({:.1f}%)", waited, result.seconds,
               100.0 * waited / std::max(1e-9, result.seconds));
}

// What an objective's own batch and eval sources draw on (train/objective/kind.h): the run's
// settings, ranks and the ids that end a completion; resuming, the checkpoint's step and what its
// batch source held.
SourceContext Session::source_context(model::CausalLM& lm, model::CausalLM& reference, data::Sampler& sampler, const ResumePoint& resume,
                                      DataParallel& parallel) const {
  SourceContext c;
  c.policy = lm;
  c.reference = reference;
  c.sampler = &sampler;
  c.datasets = &plan_.datasets;
  c.tokenizer = plan_.tokenizer.get();
  c.sampler_options = plan_.sampler_options();
  c.eval_batches = plan_.eval_batches;
  c.grad_accum = plan_.trainer.grad_accum;
  c.seed = plan_.seed;
  c.pad_id = c.sampler_options.batch.pad_id;
  c.device = plan_.device;
  c.rank = comm_.rank(), c.ranks = comm_.size();
  c.sync = parallel.sync.get();
  c.with_whole_model = [&parallel](const std::function<void()>& use) { parallel.with_whole_model(use); };
  c.stop_ids = model::generation_stop_ids(lm->config(), plan_.model_dir);
  auto add_stop = [&](std::optional<std::int64_t> id) {
    if (id && std::find(c.stop_ids.begin(), c.stop_ids.end(), *id) == c.stop_ids.end()) c.stop_ids.push_back(*id);
  };
  if (const auto eos = plan_.tokenizer->special().eos) add_stop(*eos);
  if (const auto eot = data::end_of_turn_token(plan_.datasets.chat)) {  // the assistant's turn ends there
    const auto id = plan_.tokenizer->token_to_id(*eot);
    add_stop(id ? std::optional<std::int64_t>(*id) : std::nullopt);
  }
  if (resume.state) {
    c.first_step = resume.state->step;
    c.resumed = &resume.state->source;
  }
  c.rank_part = [rank = comm_.rank(), ranks = comm_.size()](const SourceState& whole) { return split_source_state(whole, rank, ranks); };
  return c;
}

// logging.samples_every_n_steps: a few prompts with what the objective's own batch source made of
// them (grpo: completions and rewards), one line per step (rank 0); none when it has nothing to show.
void Session::write_samples(const BatchSource& source, std::int64_t step) const {
  const auto samples = plan_.objective.kind->samples;
  if (!samples || plan_.samples_every <= 0 || step % plan_.samples_every != 0) return;
  Json record = samples(source, 4);
  record["step"] = step;
  const std::string line = record.dump() + "\n";
  std::FILE* f = io::open_for_append(plan_.output_dir / io::kSamplesFile);
  std::fwrite(line.data(), 1, line.size(), f);
  std::fclose(f);
}

// The files of the run directory the resumed checkpoint recorded (CheckpointSources::run_files:
// objective.precompute_reference's table) are verified as its own files are, before anything of
// the run is touched: a changed one is refused in one line. A missing one is made anew.
void Session::verify_run_files(const ResumePoint& at) const {
  if (!at.state || !at.state->run_files) return;
  for (const auto& entry : *at.state->run_files) {
    std::error_code ec;
    if (!fs::exists(plan_.output_dir / entry.file, ec)) continue;
    if (const std::string problem = io::verify_entry(plan_.output_dir, entry); !problem.empty()) {
      throw FormatError(problem + "; the checkpoint " + at.dir->string() + " recorded it otherwise (remove the file, and the run "
                        "makes it anew)");
    }
  }
}

// The table a resumed run wrote before, once verify_run_files vouched for it. A run that starts
// from the beginning has no record of it and computes it anew; a checkpoint older than the
// record leaves it read as found.
std::optional<ReferenceTable> Session::stored_reference(std::uint64_t fingerprint, const ResumePoint& at) const {
  const fs::path path = plan_.output_dir / io::kReferenceLogps;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  if (!at.state) {
    spdlog::info("{}: no checkpoint records it, so it is computed anew", path.string());
    return std::nullopt;
  }
  if (!at.state->run_files) {
    spdlog::warn("{} records no checksum of {} (an older checkpoint): it is used as found", at.dir->string(), path.string());
  }
  const auto& ds = plan_.datasets;
  return read_reference_table(path, fingerprint, static_cast<std::int64_t>(ds.train->size()), static_cast<std::int64_t>(ds.eval->size()));
}

// objective.precompute_reference: the table this run wrote before (a resumed run reuses exactly
// those numbers: stored_reference), else one pass over both splits now, every rank running the
// same forwards (under full_shard they gather, the reference copy sharded as the policy), rank 0
// writing the table into the run directory.
std::shared_ptr<const ReferenceTable> Session::precomputed_reference(model::CausalLM& lm, DataParallel& parallel, const ResumePoint& at) const {
  const auto& ds = plan_.datasets;
  const auto n_train = static_cast<std::int64_t>(ds.train->size()), n_eval = static_cast<std::int64_t>(ds.eval->size());
  const std::uint64_t fingerprint = data::fingerprint(*ds.train) * 31 + data::fingerprint(*ds.eval);
  const fs::path path = plan_.output_dir / io::kReferenceLogps;
  auto stored = stored_reference(fingerprint, at);
  // Every rank reads, or every rank computes: a rank that looked later could otherwise find the
  // table rank 0 has just written, skip the forwards and the barrier below, and leave the others
  // waiting in a collective it never joins.
  at::Tensor missing = at::full({1}, stored ? 0 : 1, at::kLong);
  comm_.all_reduce_max(missing, "agreeing whether the reference log-probabilities are stored");
  if (missing.item<std::int64_t>() != 0) stored.reset();
  if (auto table = std::move(stored)) {
    spdlog::info("reference log-probabilities read from {}", path.string());
    return std::make_shared<const ReferenceTable>(std::move(*table));
  }
  const auto options = data::batch_options(plan_.data, *plan_.tokenizer);
  const auto train = all_batches(data::sequential_plan(*ds.train, options), -1, plan_.device, false);
  const auto eval = all_batches(data::sequential_plan(*ds.eval, options), -1, plan_.device, true);
  const ops::MemoryPhase phase("computing the reference log-probabilities");
  Stage stage("reference log-probabilities", static_cast<std::int64_t>(train.size() + eval.size()), "batches");
  auto reference = build_reference(plan_);
  parallel.shard_like_policy(reference);
  ReferenceTable table = compute_reference_table(lm, reference, train, n_train, eval, n_eval, &stage);
  table.fingerprint = fingerprint;
  // Two rows a record: a pair's, or an unpaired completion and its KL row (kto).
  stage.finish("reference log-probabilities of " + std::to_string((n_train + n_eval) / 2) +
               (plan_.data.format == data::DataFormat::unpaired_preference ? " records" : " pairs") + " in " + format_duration(stage.seconds()));
  if (writer()) write_reference_table(path, table);
  comm_.barrier("waiting for rank 0 to write the reference log-probabilities");
  return std::make_shared<const ReferenceTable>(std::move(table));
}

// Nothing was learned (every step overflowed or was NaN): an untrained result is no result.
void Session::refuse_if_nothing_learned(const TrainResult& result) const {
  const std::int64_t steps_run = result.steps - plan_.trainer.first_step;
  if (steps_run > 0 && result.skipped_steps == steps_run) {
    throw Error("all " + std::to_string(steps_run) + " steps were skipped (non-finite loss or gradients" +
                std::string(plan_.loss_scaling.enabled ? ", fp16 overflow at every loss scale" : "") +
                "); no result is written (lower optimizer.lr, use precision: bf16, or check the data)");
  }
}

void Session::report_run_peak(const Ledger& ledger, const std::optional<Json>& record, MetricsLog* metrics) {
  // The largest over the ranks: a budget is per device, and under full_shard every rank
  // gathers the whole model for the result.
  at::Tensor peak = at::tensor({ops::peak_memory(plan_.device)}, at::kLong);
  comm_.all_reduce_max(peak, "agreeing the run's peak memory");
  if (metrics && record) write_memory_record(*record, ledger, peak.item<std::int64_t>(), plan_.world.distributed(), *metrics);
}

void Session::write_result(model::CausalLM& lm, DataParallel& parallel, const WeightFiles& files) {
  const fs::path out = plan_.output_dir / plan_.method->result_name();
  const ops::MemoryPhase phase("writing the result");
  parallel.with_whole_model([&] {
    if (!writer()) return;
    Stage stage("writing " + out.string(), 0, "tensors");
    plan_.method->write_result(lm, plan_.output_dir, files);
    stage.finish();
  });
  comm_.barrier("waiting for rank 0 to write the result");
  spdlog::info("{} written to {}", plan_.method->result_name(), out.string());
}

}  // namespace ctune::train
