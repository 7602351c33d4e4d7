#include "train/step/trainer.h"

#include <ATen/record_function.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "core/clock.h"
#include "core/error.h"
#include "core/kill_point.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "ops/memory.h"
#include "ops/memory_phase.h"
#include "ops/profile_regions.h"

namespace ctune::train {

namespace {

// At debug level only: reading /proc costs a file read, kept off the loop otherwise.
void log_memory(std::int64_t step, const char* when) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  spdlog::debug("step {}: resident {:.1f} MB, peak {:.1f} MB {}", step, static_cast<double>(ops::resident_bytes()) / 1e6,
                static_cast<double>(ops::peak_resident_bytes()) / 1e6, when);
}

// Adds `weight` times each layer's expert shares to `into` (the step's mean over micro-batches).
void accumulate_load(std::vector<std::pair<std::int64_t, std::vector<double>>>& into,
                     const std::vector<std::pair<std::int64_t, std::vector<double>>>& add, double weight) {
  if (into.empty()) {
    into = add;
    for (auto& [layer, shares] : into)
      for (double& v : shares) v *= weight;
    return;
  }
  for (std::size_t l = 0; l < into.size() && l < add.size(); ++l)
    for (std::size_t e = 0; e < into[l].second.size() && e < add[l].second.size(); ++e) into[l].second[e] += weight * add[l].second[e];
}

void log_skipped_step(std::int64_t step, double loss, bool found_inf, const GradScaler& scaler) {
  if (!std::isfinite(loss)) {
    spdlog::warn("step {}: loss is {} (non-finite); the step is skipped", step, loss);
  } else if (scaler.enabled()) {
    spdlog::info("step {}: inf/NaN gradients under loss scaling; step skipped, scale backed off to {}", step, scaler.scale());
  } else {
    spdlog::warn("step {}: non-finite gradients; the step is skipped", step);
  }
}
}  // namespace

Trainer::Trainer(model::CausalLM model, Optimizer& optimizer, BatchSource& train, std::vector<TensorBatch> eval,
                 TrainerOptions options, MetricsLog* metrics)
    : model_(std::move(model)),
      optimizer_(optimizer),
      train_(train),
      eval_(std::move(eval)),
      options_(std::move(options)),
      metrics_(metrics) {
  objective = std::make_shared<SftObjective>(options_.chunked_loss);
  // The routers keep their logits for the z-loss's gradient only when it trains.
  if (model_->model->router_record) model_->model->router_record->z_loss_trains = options_.router_z_loss_coef > 0;
}

TrainResult Trainer::run() {
  TrainResult result;
  // Rank 0's (the one with metrics) progress line.
  std::optional<Progress> progress;
  if (metrics_) progress.emplace(options_.first_step, options_.max_steps, options_.log_every);
  const auto start = std::chrono::steady_clock::now();
  model_->train();

  GradScaler no_scaling(GradScalerOptions{});
  GradScaler& scaler = this->scaler ? *this->scaler : no_scaling;
  std::int64_t nonfinite_in_a_row = 0;
  stop_if_requested(options_.first_step, /*nothing_new=*/true);

  for (std::int64_t step = options_.first_step; step < options_.max_steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    profiler_or_none().begin_step(step + 1);
    ops::set_memory_phase_step(step + 1);

    // 1. This step's micro-batches, fetched first so the loss can be normalised by the
    //    step's total units (target tokens, or pairs) before any backward pass.
    //    With several ranks, the count is the whole global batch's (every rank's rows).
    std::vector<TensorBatch> micro;
    std::vector<double> counts = {0, 0, 0, 0};  // objective units, its token units, target tokens, input tokens
    for (std::int64_t i = 0; i < options_.grad_accum; ++i) {
      RECORD_USER_SCOPE(ops::region::kData);
      micro.push_back(train_.next());
      counts[0] += objective->units(micro.back());
      counts[1] += objective->token_units(micro.back());
      counts[2] += static_cast<double>(micro.back().target_tokens);
      counts[3] += static_cast<double>(micro.back().input_ids.numel());
    }
    sync().sum(counts);
    const double units = counts[0], token_units = counts[1];
    const auto targets = static_cast<std::int64_t>(counts[2]), input_tokens = static_cast<std::int64_t>(counts[3]);

    // 2. Forward and backward per micro-batch: the objective's loss sum / the step's units
    //    (times the loss scale under fp16).
    //    A model with experts adds aux_loss_coef times the routers' load-balancing loss and
    //    router_z_loss_coef times their z-loss, each micro-batch's weighted by its share of the
    //    step's units.
    const double loss_scale = scaler.scale();
    const auto names = objective->metric_names();
    std::vector<double> sums(4 + names.size(), 0.0);  // loss, token loss, aux, z, the objective's metrics
    std::vector<std::pair<std::int64_t, std::vector<double>>> load;
    for (const auto& batch : micro) {
      std::optional<ops::MemoryPhase> phase(std::in_place, "forward");
      const ObjectiveTerms terms = objective->forward(model_, batch);
      sums[0] += terms.loss_sum.item<double>();
      if (terms.token_loss_sum.defined()) sums[1] += terms.token_loss_sum.item<double>();
      for (std::size_t i = 0; i < names.size() && i < terms.metric_sums.size(); ++i) sums[4 + i] += terms.metric_sums[i];
      const double share = units > 0 ? objective->units(batch) / units : 0.0;
      const double weight = share * loss_scale;
      const RouterLosses router = router_losses(model_, options_.aux_loss_coef * weight, options_.router_z_loss_coef * weight);
      sums[2] += share * router.aux;
      sums[3] += share * router.z;
      accumulate_load(load, expert_load(model_), 1.0 / static_cast<double>(micro.size()));
      at::Tensor scaled = units > 0 ? terms.loss_sum / units : at::Tensor();
      if (terms.token_loss_sum.defined() && token_units > 0) {
        const auto part = terms.token_loss_sum / token_units;
        scaled = scaled.defined() ? scaled + part : part;
      }
      phase.emplace("backward");
      if (scaled.defined()) scaler.scale_loss(scaled).backward();
      phase.reset();
      log_memory(step + 1, "after backward");
      if (sample_memory) sample_memory();
      kill_point("step", step + 1, "mid");
    }
    sync().sum(sums);
    ObjectiveSums step_sums;
    step_sums.loss = sums[0];
    step_sums.units = units;
    step_sums.token_loss = sums[1];
    step_sums.token_units = token_units;
    const double loss = mean_loss(step_sums);

    // 3. Gradients summed over ranks (one process: as they are). Unscale and check them, clip, update at the scheduled learning rate, clear
    //    gradients. A step with a non-finite loss or gradient applies no update (fp16: the
    //    scale backs off); too many non-finite losses in a row stop the run.
    std::optional<ops::MemoryPhase> phase(std::in_place, "gradient reduction");
    sync().reduce_gradients(optimizer_.groups());
    if (sample_memory) sample_memory();
    phase.emplace("optimizer step");
    std::vector<double> inf_found = {scaler.unscale_and_check(optimizer_.groups()) ? 1.0 : 0.0};
    sync().sum_over_shards(inf_found);
    const bool found_inf = inf_found[0] > 0;
    const bool skip = found_inf || !std::isfinite(loss);
    const double lr = learning_rate(options_.schedule, step);
    double grad_norm = std::nan("");
    if (!skip) {
      std::vector<double> norm_sq = {squared_grad_norm(optimizer_.groups())};
      sync().sum_over_shards(norm_sq);
      grad_norm = std::sqrt(norm_sq[0]);
      clip_gradients(optimizer_.groups(), options_.clip_grad_norm, grad_norm);
      optimizer_.step(lr);
    }
    scaler.update(found_inf);
    log_memory(step + 1, "after the update");
    optimizer_.zero_grad();
    phase.reset();
    nonfinite_in_a_row = std::isfinite(loss) ? 0 : nonfinite_in_a_row + 1;
    if (skip) {
      ++result.skipped_steps;
      log_skipped_step(step + 1, loss, found_inf, scaler);
    }
    // 4. Report.
    StepMetrics m{step + 1, loss, lr, grad_norm, targets};
    measure(m, input_tokens, step_start, start);
    m.skipped = skip;
    m.loss_scale = scaler.enabled() ? loss_scale : 0.0;
    if (!load.empty()) {
      m.aux_loss = sums[2];
      m.z_loss = sums[3];
      m.expert_load = std::move(load);
    }
    m.objective = metric_means(*objective, std::vector<double>(sums.begin() + 4, sums.end()), units, token_units);
    for (auto& figure : train_.figures()) m.objective.push_back(std::move(figure));
    if (metrics_) metrics_->write(m);
    if (nonfinite_in_a_row >= options_.max_nonfinite_steps) {
      throw Error("step " + std::to_string(m.step) + ": the loss was non-finite in " + std::to_string(nonfinite_in_a_row) +
                  " steps in a row (training.max_nonfinite_steps); lower optimizer.lr, use bf16 instead of fp16, or check the data");
    }
    kill_point("step", m.step, "after");
    if (progress) progress->step(m);
    result.last_loss = loss;
    result.steps = m.step;

    // 5. Evaluate on cadence and at the end.
    phase.emplace("evaluation");
    evaluate_on_cadence(m.step, progress ? &*progress : nullptr, result);
    phase.emplace("checkpoint");
    if (on_step_end) on_step_end(m.step);
    phase.reset();

    // 6. A stop request (SIGTERM/SIGINT) ends the run here, this step complete and saved.
    if (m.step < options_.max_steps) stop_if_requested(m.step, /*nothing_new=*/false);
  }
  if (progress) progress->finish();
  result.seconds = seconds_since(start);
  return result;
}

void Trainer::measure(StepMetrics& m, std::int64_t input_tokens, std::chrono::steady_clock::time_point step_start,
                      std::chrono::steady_clock::time_point start) {
  const double seconds = seconds_since(step_start);
  m.input_tokens = input_tokens;
  m.tokens_per_s = static_cast<double>(input_tokens) / std::max(1e-9, seconds);
  m.profile = profiler_or_none().end_step(seconds, input_tokens);
  m.peak_mem_bytes = ops::peak_memory(options_.device);
  m.elapsed_s = seconds_since(start);
  const auto cpu = process_cpu_times();
  m.cpu_s = cpu.total_s;
  m.sys_s = cpu.system_s;
}

void Trainer::evaluate_on_cadence(std::int64_t step, Progress* progress, TrainResult& result) {
  const bool last = step == options_.max_steps;
  if ((eval_.empty() && !eval_source) || !(last || (options_.eval_every > 0 && step % options_.eval_every == 0))) return;
  if (eval_source) eval_ = eval_source->batches();
  Stage stage("eval at step " + std::to_string(step), static_cast<std::int64_t>(eval_.size()), "batches");
  const EvalMetrics e = evaluate(step, &stage);
  if (metrics_) {
    metrics_->write(e);
    progress->eval(e, stage);
  }
  if (last) result.final_eval_loss = e.eval_loss;
}

void Trainer::stop_if_requested(std::int64_t step, bool nothing_new) {
  const int signal = sync().agree_on_stop(stop_requested());
  if (signal == 0) return;
  if (on_stop && !nothing_new) on_stop(step, signal);  // saves the step and throws
  throw StoppedError(signal, signal_name(signal) + " before the first step of this run: nothing new to save");
}

StepProfiler& Trainer::profiler_or_none() {
  static StepProfiler off;
  return profiler ? *profiler : off;
}

StepSync& Trainer::sync() {
  static StepSync alone;
  return step_sync ? *step_sync : alone;
}

EvalMetrics Trainer::evaluate(std::int64_t step, Stage* stage) {
  ObjectiveSums mine = evaluate_objective(*objective, model_, eval_, stage);
  std::vector<double> sums = {mine.loss, mine.units, mine.token_loss, mine.token_units, static_cast<double>(mine.target_tokens)};
  sums.insert(sums.end(), mine.metrics.begin(), mine.metrics.end());
  sync().sum(sums);
  ObjectiveSums all;
  all.loss = sums[0];
  all.units = sums[1];
  all.token_loss = sums[2];
  all.token_units = sums[3];
  EvalMetrics e{step, mean_loss(all), static_cast<std::int64_t>(sums[4])};
  e.objective = metric_means(*objective, std::vector<double>(sums.begin() + 5, sums.end()), all.units, all.token_units);
  if (eval_source) {
    const auto figures = eval_source->figures();
    e.objective.insert(e.objective.end(), figures.begin(), figures.end());
  }
  e.token_loss = objective->token_loss();
  return e;
}

}  // namespace ctune::train
