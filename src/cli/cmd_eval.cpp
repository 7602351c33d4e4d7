// `ctune eval RECIPE [key=value ...] [--adapter DIR | --model DIR] [--accuracy]`: the held-out
// metrics of a model as the recipe's run has it: eval loss (mean token NLL) and perplexity over
// the eval split and, with --accuracy, exact-match accuracy of greedy generations of the first
// response of each eval example against the reference.
// `ctune eval --model DIR [--adapter DIR] --data FILE [--format F] [key=value ...]` needs no
// recipe: FILE is the eval split, read and masked with the recipe defaults (overrides such as
// data.max_seq_len=4096 or model.dtype=bf16 apply). The model is built and evaluated exactly as `train` builds and
// evaluates it (train::build_model, the recipe's objective and train::evaluate_objective): the same storage and compute dtypes,
// quantised base and loss, so `eval` reports the eval_loss that training logged for the same
// weights. --adapter DIR evaluates model.path with that adapter (its own adapter_config.json
// replaces the recipe's LoRA settings); --model DIR evaluates that model instead of model.path.
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/error.h"
#include "core/json.h"
#include "core/progress.h"
#include "core/recipe.h"
#include "core/recipe_schema.h"
#include "infer/exact_match.h"
#include "model/config.h"
#include "ops/tensor_pool.h"
#include "ops/threads.h"
#include "train/run/run_plan.h"
#include "train/step/batches.h"
#include "train/objective/objectives.h"
#include "train/step/loss.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct EvalOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string adapter;
  std::string model;  // replaces model.path (e.g. a fully fine-tuned output)
  std::string data, format;  // without a recipe: the data to evaluate and its format
  bool accuracy = false;
  std::int64_t limit = -1;
  std::int64_t show = 0;
  bool json = false;
};

// Exact matches (infer/exact_match.h), the first `show` of them printed.
infer::Accuracy exact_match(model::CausalLM& lm, const std::vector<data::Example>& examples, const tok::Tokenizer& tokenizer,
                            std::int64_t limit, std::int64_t show) {
  std::int64_t seen = 0;
  auto text = [&](const std::vector<std::int64_t>& ids) {
    return Json(tokenizer.decode(std::vector<std::int32_t>(ids.begin(), ids.end()), true)).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  return infer::exact_match(lm, examples, tokenizer.special().eos, limit,
                            [&](const infer::MatchCase& c, const std::vector<std::int64_t>& got, bool ok) {
    if (++seen > show) return;
    std::string p = text(c.prompt);
    if (p.size() > 70) p = "..." + p.substr(p.size() - 67);
    print_above([&] {  // stdout may be the terminal the live line is on
      std::printf("  %s  prompt %s\n      expected %s\n      got      %s\n", ok ? "ok  " : "MISS", p.c_str(), text(c.expected).c_str(),
                  text(got).c_str());
      std::fflush(stdout);
    });
  });
}

// Without a recipe: the defaults, with the model and the data file (as both splits: eval reads
// it, and the training split every recipe needs is the same examples, not read twice).
Recipe recipe_for(const EvalOptions& o, std::vector<std::string> overrides) {
  if (!o.recipe.empty()) {
    if (!o.data.empty() || !o.format.empty()) {
      throw ConfigError("--data/--format replace a recipe: give either RECIPE (its data.eval) or --data FILE");
    }
    return Recipe::load(o.recipe, overrides);
  }
  if (o.model.empty() || o.data.empty()) throw ConfigError("give RECIPE, or --model DIR and --data FILE");
  auto quoted = [](const std::string& s) { return Json(s).dump(); };  // a YAML double-quoted scalar
  std::vector<std::string> keys = {"output_dir=" + quoted("(ctune eval writes nothing)"), "data.train=" + quoted(o.data),
                                   "data.eval=" + quoted(o.data), "training.max_steps=1"};  // a plan needs a length
  if (!o.format.empty()) keys.push_back("data.format=" + quoted(o.format));
  // data.max_seq_len's default, but never past the model's context: a recipe-less eval should
  // not warn about positions the model was never trained on.
  const bool length_given = std::any_of(overrides.begin(), overrides.end(),
                                        [](const std::string& kv) { return kv.rfind("data.max_seq_len=", 0) == 0; });
  if (!length_given) {
    const std::int64_t context = model::load_model_config(o.model).max_position_embeddings;
    if (context < std::stoll(find_key_spec("data.max_seq_len")->default_yaml)) keys.push_back("data.max_seq_len=" + std::to_string(context));
  }
  overrides.insert(overrides.begin(), keys.begin(), keys.end());
  return Recipe::parse("", "ctune eval --model/--data", overrides);
}

int run_eval(EvalOptions o) {
  // Without a recipe the first key=value lands in the recipe's place on the command line.
  if (is_override_in_path_slot(o.recipe)) {
    o.overrides.insert(o.overrides.begin(), o.recipe);
    o.recipe.clear();
  }
  auto overrides = o.overrides;
  if (!o.model.empty()) overrides.push_back("model.path=" + Json(o.model).dump());
  if (!o.adapter.empty()) {
    // Start the run's LoRA from this adapter: its config and weights, over model.path.
    overrides.push_back("peft.method=lora");
    overrides.push_back("peft.init_from=" + Json(o.adapter).dump());
  }
  auto plan = train::plan_run(recipe_for(o, overrides));
  ops::use_threads(plan.threads);
  ops::use_allocator(plan.exact_allocator);  // memory.allocator, as training runs it (ops/tensor_pool.h)
  if (plan.datasets.eval->empty()) {
    throw ConfigError(o.recipe + ": no eval data to evaluate on (set data.eval or data.eval_fraction, or give --data FILE)");
  }
  auto lm = train::build_model(plan);
  auto batches = train::all_batches(data::sequential_plan(*plan.datasets.eval, data::batch_options(plan.data, *plan.tokenizer)),
                                    plan.eval_batches, plan.device, /*eval_split=*/true);
  Stage stage("evaluating " + plan.datasets.eval_stats.file, static_cast<std::int64_t>(batches.size()), "batches");
  // The recipe's objective, as training evaluates it (a preference objective: its pair loss and
  // reward metrics against the same reference).
  auto objective = train::make_objective(plan.objective, plan.trainer.chunked_loss, train::build_reference(plan), nullptr,
                                         train::build_teacher(plan));
  const auto eval = train::evaluate_objective(*objective, lm, batches, &stage);
  stage.finish();
  const double loss = train::mean_loss(eval);
  const std::int64_t tokens = eval.target_tokens;
  const bool token_loss = objective->token_loss();
  lm->eval();
  at::NoGradGuard no_grad;
  infer::Accuracy acc;
  if (o.accuracy && !token_loss)
    throw ConfigError("--accuracy generates each example's reference response; a preference split has two per prompt (evaluate the "
                      "task with an SFT recipe's data instead)");
  if (o.accuracy) acc = exact_match(lm, *plan.datasets.eval, *plan.tokenizer, o.limit, o.show);

  // Perplexity is exp of the mean token NLL: exp of the mean of `ctune score`'s NLLs over the
  // same target tokens.
  nlohmann::ordered_json out = {{"eval_loss", loss}};
  if (token_loss) out["eval_ppl"] = std::exp(loss);
  out["eval_tokens"] = tokens;
  const auto means = train::metric_means(*objective, eval.metrics, eval.units, eval.token_units);
  for (const auto& [name, value] : means) out["eval_" + name] = value;
  if (!token_loss) out["eval_pairs"] = eval.units;
  if (o.accuracy) {
    out["accuracy"] = acc.total ? static_cast<double>(acc.correct) / static_cast<double>(acc.total) : 0.0;
    out["correct"] = acc.correct;
    out["examples"] = acc.total;
  }
  if (o.json) {
    std::cout << out.dump() << std::endl;
    return 0;
  }
  // A table: what was evaluated, then the metrics.
  std::printf("%-12s %s%s\n", "model", plan.model_dir.string().c_str(), o.adapter.empty() ? "" : (" + adapter " + o.adapter).c_str());
  std::printf("%-12s %s: %zu examples (%s)\n", "data", plan.datasets.eval_stats.file.c_str(), plan.datasets.eval->size(),
              data::to_string(plan.data.format).c_str());
  std::printf("%-12s %lld\n", "tokens", static_cast<long long>(tokens));
  std::printf("%-12s %.4f\n", token_loss ? "eval loss" : ("eval " + objective->name() + " loss").c_str(), loss);
  if (token_loss) std::printf("%-12s %.3f\n", "perplexity", std::exp(loss));
  for (const auto& [name, value] : means) std::printf("%-18s %.4f\n", name.c_str(), value);
  if (o.accuracy) {
    std::printf("%-12s %.1f%% (%lld/%lld exact matches)\n", "accuracy", 100.0 * out["accuracy"].get<double>(),
                static_cast<long long>(acc.correct), static_cast<long long>(acc.total));
  }
  return 0;
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand("eval", "Eval loss and perplexity (and exact-match accuracy) of a model on a recipe's eval split or a data file");
  cmd->add_option("recipe", opts->recipe, "Recipe file (YAML); or give --model and --data instead");
  cmd->add_option("overrides", opts->overrides, "key.sub=value overrides");
  cmd->add_option("--adapter", opts->adapter, "PEFT LoRA adapter directory to apply to model.path");
  cmd->add_option("--model", opts->model, "Model directory to evaluate instead of model.path");
  cmd->add_option("--data", opts->data, "Without a recipe: the data file to evaluate (JSONL or a JSON array)");
  cmd->add_option("--format", opts->format, "Without a recipe: the data's format (instruct, chat, text; default instruct)");
  cmd->add_flag("--accuracy", opts->accuracy, "Also generate each example's response greedily and count exact matches");
  cmd->add_option("--limit", opts->limit, "Evaluate accuracy on the first N examples only");
  cmd->add_option("--show", opts->show, "Print the first N generations");
  cmd->add_flag("--json", opts->json, "Print the metrics as one JSON object");
  cmd->callback([opts, &run] { run = [opts] { return run_eval(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
