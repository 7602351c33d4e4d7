// `ctune train RECIPE [key=value ...]`: the main job. Resolves and checks the recipe (every
// error before any weight is loaded), builds the model, trains, and writes the result into
// output_dir: the LoRA adapter in PEFT layout (adapter/) or the full model in Hugging Face
// layout (model/), plus recipe.yaml (resolved), metrics.jsonl and train.log.
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
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "train/batches.h"
#include "train/run_plan.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  bool overwrite = false;
};

// A run directory is fresh, or explicitly replaced: mixing two runs' metrics is never right.
void prepare_output_dir(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    if (!overwrite) {
      throw ConfigError("output_dir " + dir.string() + " already holds files (pass --overwrite to replace the run)");
    }
    for (const char* name : {"metrics.jsonl", "train.log", "recipe.yaml", "adapter", "model"}) fs::remove_all(dir / name, ec);
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


int run_train(const TrainOptions& o) {
  // 1. Recipe -> plan: all checks, nothing allocated.
  auto plan = train::plan_run(Recipe::load(o.recipe, o.overrides));
  at::set_num_threads(plan.threads);
  at::manual_seed(static_cast<std::uint64_t>(plan.recipe.get_int("seed")));
  prepare_output_dir(plan.output_dir, o.overwrite);
  log_to_run_dir(plan.output_dir);
  io::write_file_atomic(plan.output_dir / "recipe.yaml", plan.recipe.to_yaml());
  spdlog::info("recipe {} resolved into {}", o.recipe, (plan.output_dir / "recipe.yaml").string());
  for (std::size_t pos = 0, end; (end = plan.summary().find('\n', pos)) != std::string::npos; pos = end + 1) {
    spdlog::info("{}", plan.summary().substr(pos, end - pos));
  }

  // 2. Model, adapters, optimizer.
  peft::LoraSummary counts;
  auto lm = train::build_model(plan, &counts);
  spdlog::info("trainable parameters {} of {} ({:.4f}%)", counts.trainable, counts.total,
               100.0 * static_cast<double>(counts.trainable) / static_cast<double>(std::max<std::int64_t>(1, counts.total)));
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true))
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  auto optimizer = train::make_optimizer(train::make_param_groups(trainable, plan.optimizer), plan.optimizer);

  // 3. Data.
  data::Sampler sampler(plan.datasets.train, data::sampler_options(plan.data, *plan.tokenizer));
  train::SamplerSource source(sampler);
  auto eval = train::all_batches(data::sequential_plan(*plan.datasets.eval, data::batch_options(plan.data, *plan.tokenizer)),
                                 plan.eval_batches);

  // 4. Train.
  train::MetricsLog metrics(plan.output_dir);
  train::Trainer trainer(lm, *optimizer, source, std::move(eval), plan.trainer, &metrics);
  const auto result = trainer.run();

  // 5. The result, in the ecosystem's layouts.
  if (plan.lora) {
    const fs::path out = plan.output_dir / "adapter";
    peft::save_adapter(lm, plan.lora_options, out, fs::absolute(plan.model_dir).string(), /*overwrite=*/true);
    spdlog::info("LoRA adapter written to {}", out.string());
  } else {
    const fs::path out = plan.output_dir / "model";
    model::SaveOptions save;
    save.overwrite = true;
    model::save_causal_lm(lm, out, save, [&](const fs::path& staging) { io::copy_tokenizer_files(plan.tokenizer_dir, staging); });
    spdlog::info("model written to {}", out.string());
  }
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
  cmd->add_flag("--overwrite", opts->overwrite, "Replace the results of an earlier run in output_dir");
  cmd->callback([opts, &run] { run = [opts] { return run_train(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
