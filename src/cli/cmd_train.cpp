// `ctune train RECIPE [key=value ...] [--resume [CHECKPOINT]]`: the main job. Resolves and
// checks the recipe (every error before any weight is loaded), builds the model, trains with
// step checkpoints, and writes the result into output_dir: the LoRA adapter in PEFT layout
// (adapter/) or the full model in Hugging Face layout (model/), plus recipe.yaml (resolved),
// metrics.jsonl, train.log and checkpoints/. With --resume it continues from the newest
// complete checkpoint (or the one given) exactly where that run stood.
#include <ATen/Parallel.h>

#include <spdlog/sinks/basic_file_sink.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/recipe.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/manifest.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/resume.h"
#include "train/run_plan.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  bool overwrite = false;
  bool resume = false;
  std::string resume_from;  // empty: the newest complete checkpoint
};

// A run directory is fresh, or explicitly replaced: mixing two runs' metrics is never right.
void prepare_output_dir(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    if (!overwrite) {
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

// Predicted against measured peak memory, in the log and as the last line of metrics.jsonl.
void report_memory(const train::Ledger& ledger, train::MetricsLog& metrics, std::int64_t start_bytes) {
  const auto measured = train::peak_resident_bytes();
  const double ratio = static_cast<double>(measured) / static_cast<double>(std::max<std::int64_t>(1, ledger.peak_bytes));
  spdlog::info("memory: predicted peak {:.1f} MB, measured {:.1f} MB (measured/predicted {:.3f})",
               static_cast<double>(ledger.peak_bytes) / 1e6, static_cast<double>(measured) / 1e6, ratio);
  Json line = {{"memory", ledger.to_json()}};
  line["memory"]["measured_peak_bytes"] = measured;
  line["memory"]["measured_start_bytes"] = start_bytes;  // resident when training began
  metrics.write_line(line.dump());
}

// The checkpoint to resume from, after every check; nullopt: start from the beginning.
std::optional<fs::path> find_resume_point(const TrainOptions& o, const train::RunPlan& plan) {
  if (!o.resume_from.empty()) {
    const std::string problem = io::verify_manifest(o.resume_from);
    if (!problem.empty()) throw ConfigError("--resume " + o.resume_from + ": not a usable checkpoint: " + problem);
    return fs::path(o.resume_from);
  }
  std::vector<std::string> skipped;
  auto latest = train::CheckpointManager(plan.output_dir, 1).latest(&skipped);
  for (const auto& s : skipped) spdlog::warn("skipping checkpoint {}", s);
  if (!latest) spdlog::warn("no complete checkpoint in {}: starting from the beginning", (plan.output_dir / "checkpoints").string());
  return latest;
}

int run_train(const TrainOptions& o) {
  // 1. Recipe -> plan: all checks, nothing allocated.
  auto plan = train::plan_run(Recipe::load(o.recipe, o.overrides));
  at::set_num_threads(plan.threads);
  // Denormal floats make x86 arithmetic up to 100x slower; they appear once optimizer state and
  // gradients hold tiny values. Flush them to zero (FTZ/DAZ), as torch.set_flush_denormal(True).
  at::globalContext().setFlushDenormal(true);
  if (plan.recipe.get_string("memory.allocator") == "exact") train::use_exact_allocator();
  at::manual_seed(static_cast<std::uint64_t>(plan.recipe.get_int("seed")));
  std::optional<fs::path> resume_dir;
  std::optional<train::TrainingState> resumed;
  if (o.resume) {
    if (!fs::exists(plan.output_dir)) throw ConfigError("--resume: output_dir " + plan.output_dir.string() + " does not exist");
    resume_dir = find_resume_point(o, plan);
    if (resume_dir) {
      resumed = train::read_training_state(*resume_dir);
      const Recipe saved = Recipe::parse(resumed->recipe_yaml, (*resume_dir / "recipe.yaml").string());
      for (const auto& note : train::check_resume_compatible(saved, plan.recipe, resumed->step)) spdlog::info("note: {}", note);
    }
    train::truncate_metrics(plan.output_dir, resumed ? resumed->step : 0);
  } else {
    prepare_output_dir(plan.output_dir, o.overwrite);
  }
  log_to_run_dir(plan.output_dir);
  io::write_file_atomic(plan.output_dir / "recipe.yaml", plan.recipe.to_yaml());
  const std::string summary = plan.summary();
  for (std::size_t pos = 0, end; (end = summary.find('\n', pos)) != std::string::npos; pos = end + 1) {
    spdlog::info("{}", summary.substr(pos, end - pos));
  }

  // 2. Model (from the checkpoint when resuming), adapters, optimizer; the memory it should take.
  const auto ledger = train::estimate_memory(train::ledger_inputs(plan, train::resident_bytes()));
  peft::LoraSummary counts;
  auto lm = train::build_model(plan, &counts, resume_dir ? *resume_dir : fs::path());
  spdlog::debug("resident {:.1f} MB after the model is built", static_cast<double>(train::resident_bytes()) / 1e6);
  spdlog::info("trainable parameters {} of {} ({:.4f}%)", counts.trainable, counts.total,
               100.0 * static_cast<double>(counts.trainable) / static_cast<double>(std::max<std::int64_t>(1, counts.total)));
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true))
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  auto optimizer = train::make_optimizer(train::make_param_groups(trainable, plan.optimizer), plan.optimizer);

  // 3. Data.
  data::Sampler sampler(plan.datasets.train, data::sampler_options(plan.data, *plan.tokenizer));
  train::SamplerSource source(sampler);
  spdlog::debug("resident {:.1f} MB with optimizer and data", static_cast<double>(train::resident_bytes()) / 1e6);
  auto eval = train::all_batches(data::sequential_plan(*plan.datasets.eval, data::batch_options(plan.data, *plan.tokenizer)),
                                 plan.eval_batches);

  // 4. Where the checkpoint left off: step, optimizer, loss scale, data cursor, RNG.
  train::GradScaler scaler(plan.loss_scaling);
  if (resumed) {
    plan.trainer.first_step = resumed->step;
    optimizer->load_state(resumed->optimizer);
    if (resumed->scaler) scaler.load_state(*resumed->scaler);
    sampler.restore(resumed->sampler);
    train::restore_rng(resumed->rng);
    spdlog::info("resumed from {} at step {}", resume_dir->string(), resumed->step);
  }

  // 5. Train, checkpointing on cadence and at the end.
  train::CheckpointManager checkpoints(plan.output_dir, plan.recipe.get_int("checkpoint.keep_last"));
  checkpoints.apply_retention();
  train::CheckpointSources sources{lm, plan.lora ? &plan.lora_options : nullptr, optimizer.get(), &sampler,
                                   &plan.recipe, &scaler, plan.model_dir, plan.tokenizer_dir, plan.shard_bytes};
  const auto every = plan.recipe.get_int("checkpoint.every_n_steps");
  std::int64_t last_checkpoint = resumed ? resumed->step : -1;
  train::MetricsLog metrics(plan.output_dir);
  train::Trainer trainer(lm, *optimizer, source, std::move(eval), plan.trainer, &metrics);
  trainer.scaler = &scaler;
  trainer.on_step_end = [&](std::int64_t step) {
    if ((every > 0 && step % every == 0) || step == plan.trainer.max_steps) {
      checkpoints.write(step, sources);
      last_checkpoint = step;
    }
  };
  const auto start_bytes = train::resident_bytes();
  train::reset_peak_resident();  // the measured peak is training's, not loading's
  const auto result = trainer.run();
  report_memory(ledger, metrics, start_bytes);
  if (last_checkpoint != plan.trainer.max_steps) checkpoints.write(plan.trainer.max_steps, sources);

  // 6. The result, in the ecosystem's layouts.
  if (plan.lora) {
    const fs::path out = plan.output_dir / "adapter";
    peft::save_adapter(lm, plan.lora_options, out, fs::absolute(plan.model_dir).string(), /*overwrite=*/true);
    spdlog::info("LoRA adapter written to {}", out.string());
  } else {
    const fs::path out = plan.output_dir / "model";
    model::SaveOptions save;
    save.overwrite = true;
    save.max_shard_bytes = plan.shard_bytes;
    model::save_causal_lm(lm, out, save, [&](const fs::path& staging) { io::copy_tokenizer_files(plan.tokenizer_dir, staging); });
    spdlog::info("model written to {}", out.string());
  }
  if (result.skipped_steps > 0) spdlog::info("{} steps were skipped (non-finite loss or gradients)", result.skipped_steps);
  spdlog::info("done: {} steps in {:.1f} s, last loss {:.4f}{}", result.steps, result.seconds, result.last_loss,
               result.final_eval_loss ? fmt::format(", eval loss {:.4f}", *result.final_eval_loss) : std::string());
  return 0;
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Fine-tune a model as a YAML recipe says (full or LoRA)");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML)")->required();
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides, e.g. optimizer.lr=1e-4");
  auto* overwrite = cmd->add_flag("--overwrite", opts->overwrite, "Replace the results of an earlier run in output_dir");
  auto* resume = cmd->add_option("--resume", opts->resume_from,
                                 "Continue the run in output_dir from its newest complete checkpoint, or from CHECKPOINT")
                     ->expected(0, 1);
  resume->excludes(overwrite);
  cmd->callback([opts, cmd, &run] {
    opts->resume = cmd->count("--resume") > 0;
    run = [opts] { return run_train(*opts); };
  });
  return cmd;
}

}  // namespace ctune::cli
