#include "train/session.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <spdlog/sinks/basic_file_sink.h>

#include "core/error.h"
#include "core/log.h"
#include "io/file.h"
#include "io/manifest.h"
#include "train/batches.h"
#include "train/metrics.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

// Logs go to output_dir/train.log as well as stderr; step lines go to the file only.
void log_to_run_dir(const fs::path& dir) {
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((dir / "train.log").string());
  spdlog::default_logger()->sinks().push_back(file);
  auto train_log = std::make_shared<spdlog::logger>("train", file);
  train_log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %v");
  train_log->flush_on(spdlog::level::info);
  spdlog::register_logger(train_log);
  spdlog::default_logger()->flush_on(spdlog::level::info);
}

void log_lines(const std::string& text) {
  for (std::size_t pos = 0, end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    spdlog::info("{}", text.substr(pos, end - pos));
  }
}

// Predicted against measured peak memory, in the log and as the last line of metrics.jsonl.
void report_memory(const Ledger& ledger, MetricsLog& metrics, std::int64_t start_bytes) {
  const auto measured = peak_resident_bytes();
  const double ratio = static_cast<double>(measured) / static_cast<double>(std::max<std::int64_t>(1, ledger.peak_bytes));
  spdlog::info("memory: predicted peak {:.1f} MB, measured {:.1f} MB (measured/predicted {:.3f})",
               static_cast<double>(ledger.peak_bytes) / 1e6, static_cast<double>(measured) / 1e6, ratio);
  Json line = {{"memory", ledger.to_json()}};
  line["memory"]["measured_peak_bytes"] = measured;
  line["memory"]["measured_start_bytes"] = start_bytes;  // resident when training began
  metrics.write_line(line.dump());
}

}  // namespace

Session::Session(RunPlan plan, SessionOptions options) : plan_(std::move(plan)), options_(std::move(options)) {
  if (options_.resume && options_.overwrite) throw ConfigError("--resume and --overwrite exclude each other");
  if (options_.resume && !fs::exists(plan_.output_dir)) {
    throw ConfigError("--resume: output_dir " + plan_.output_dir.string() + " does not exist");
  }
}

std::optional<fs::path> Session::find_resume_point() const {
  if (!options_.resume_from.empty()) {
    const std::string problem = io::verify_manifest(options_.resume_from);
    if (!problem.empty()) throw ConfigError("--resume " + options_.resume_from.string() + ": not a usable checkpoint: " + problem);
    return options_.resume_from;
  }
  std::vector<std::string> skipped;
  auto latest = CheckpointManager(plan_.output_dir, 1).latest(&skipped);
  for (const auto& s : skipped) spdlog::warn("skipping checkpoint {}", s);
  if (!latest) spdlog::warn("no complete checkpoint in {}: starting from the beginning", (plan_.output_dir / "checkpoints").string());
  return latest;
}

// A run directory is fresh, explicitly replaced, or the run being resumed (cut back to the
// checkpoint): mixing two runs' metrics is never right.
void Session::prepare_run_dir(std::int64_t resumed_step) {
  const fs::path& dir = plan_.output_dir;
  std::error_code ec;
  if (options_.resume) {
    truncate_metrics(dir, resumed_step);
  } else if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    if (!options_.overwrite) {
      throw ConfigError("output_dir " + dir.string() +
                        " already holds files (pass --resume to continue that run, --overwrite to replace it)");
    }
    for (const char* name : {"metrics.jsonl", "train.log", "recipe.yaml", "adapter", "model", "checkpoints"}) {
      fs::remove_all(dir / name, ec);
    }
  }
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create directory (" + ec.message() + ")");
}

TrainResult Session::run() {
  RunPlan& plan = plan_;
  // 1. The process: threads, denormals, allocator, RNG. Denormal floats make x86 arithmetic up
  //    to 100x slower; they appear once optimizer state and gradients hold tiny values. Flush
  //    them to zero (FTZ/DAZ), as torch.set_flush_denormal(True).
  at::set_num_threads(plan.threads);
  at::globalContext().setFlushDenormal(true);
  if (plan.exact_allocator) use_exact_allocator();
  at::manual_seed(plan.seed);

  // 2. Where the run stands: a checkpoint to resume from (after every check), and the run
  //    directory to match.
  std::optional<fs::path> resume_dir;
  std::optional<TrainingState> resumed;
  if (options_.resume) {
    resume_dir = find_resume_point();
    if (resume_dir) {
      resumed = read_training_state(*resume_dir);
      const auto notes = check_resume_compatible(plan, resumed->recipe_yaml, (*resume_dir / "recipe.yaml").string(), resumed->step);
      for (const auto& note : notes) spdlog::info("note: {}", note);
    }
  }
  prepare_run_dir(resumed ? resumed->step : 0);
  log_to_run_dir(plan.output_dir);
  io::write_file_atomic(plan.output_dir / "recipe.yaml", plan.recipe_yaml());
  log_lines(plan.summary());

  // 3. Model (from the checkpoint when resuming), what trains, optimizer; the memory it should take.
  const auto ledger = estimate_memory(ledger_inputs(plan, resident_bytes()));
  auto lm = build_model(plan, resume_dir.value_or(fs::path()));
  const auto counts = plan.method->make_trainable(lm);
  spdlog::debug("resident {:.1f} MB after the model is built", static_cast<double>(resident_bytes()) / 1e6);
  spdlog::info("trainable parameters {} of {} ({:.4f}%)", counts.trainable, counts.total,
               100.0 * static_cast<double>(counts.trainable) / static_cast<double>(std::max<std::int64_t>(1, counts.total)));
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true))
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  auto optimizer = make_optimizer(make_param_groups(trainable, plan.optimizer), plan.optimizer);

  // 4. Data.
  data::Sampler sampler(plan.datasets.train, data::sampler_options(plan.data, *plan.tokenizer));
  SamplerSource source(sampler);
  spdlog::debug("resident {:.1f} MB with optimizer and data", static_cast<double>(resident_bytes()) / 1e6);
  auto eval = all_batches(data::sequential_plan(*plan.datasets.eval, data::batch_options(plan.data, *plan.tokenizer)),
                          plan.eval_batches);

  // 5. Where the checkpoint left off: step, optimizer, loss scale, data cursor, RNG.
  GradScaler scaler(plan.loss_scaling);
  if (resumed) {
    plan.trainer.first_step = resumed->step;
    optimizer->load_state(resumed->optimizer);
    if (resumed->scaler) scaler.load_state(*resumed->scaler);
    sampler.restore(resumed->sampler);
    restore_rng(resumed->rng);
    spdlog::info("resumed from {} at step {}", resume_dir->string(), resumed->step);
  }

  // 6. Train, checkpointing on cadence and at the end.
  CheckpointManager checkpoints(plan.output_dir, plan.checkpoint.keep_last);
  checkpoints.apply_retention();
  const WeightFiles files{plan.model_dir, plan.tokenizer_dir, plan.checkpoint.shard_bytes};
  CheckpointSources sources{lm, plan.method.get(), files, optimizer.get(), &sampler, plan.recipe_yaml(), &scaler};
  const auto every = plan.checkpoint.every_n_steps;
  std::int64_t last_checkpoint = resumed ? resumed->step : -1;
  MetricsLog metrics(plan.output_dir);
  Trainer trainer(lm, *optimizer, source, std::move(eval), plan.trainer, &metrics);
  trainer.scaler = &scaler;
  trainer.on_step_end = [&](std::int64_t step) {
    if ((every > 0 && step % every == 0) || step == plan.trainer.max_steps) {
      checkpoints.write(step, sources);
      last_checkpoint = step;
    }
  };
  const auto start_bytes = resident_bytes();
  reset_peak_resident();  // the measured peak is training's, not loading's
  const auto result = trainer.run();
  report_memory(ledger, metrics, start_bytes);
  if (last_checkpoint != plan.trainer.max_steps) checkpoints.write(plan.trainer.max_steps, sources);

  // 7. The result, in the ecosystem's layouts: output_dir/model or output_dir/adapter.
  plan.method->write_result(lm, plan.output_dir, files);
  spdlog::info("{} written to {}", plan.method->result_name(), (plan.output_dir / plan.method->result_name()).string());
  if (result.skipped_steps > 0) spdlog::info("{} steps were skipped (non-finite loss or gradients)", result.skipped_steps);
  spdlog::info("done: {} steps in {:.1f} s, last loss {:.4f}{}", result.steps, result.seconds, result.last_loss,
               result.final_eval_loss ? fmt::format(", eval loss {:.4f}", *result.final_eval_loss) : std::string());
  return result;
}

}  // namespace ctune::train
