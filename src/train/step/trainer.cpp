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

// The figures a step counts from its micro-batches before any forward (the normalisers of its
// loss), summed over the ranks: with several ranks, the whole global batch's.
struct Trainer::StepCounts {
  double units = 0;          // the objective's units (target tokens, or pairs)
  double token_units = 0;    // the units of its token-normalised part
  double target_tokens = 0;  // whole numbers; a double for the all-reduce
  double input_tokens = 0;   // positions the forwards run over, targets or not
};

// What a step's forwards sum, over its micro-batches and then over the ranks.
struct Trainer::StepSums {
  double loss = 0;        // the objective's loss sum
  double token_loss = 0;  // its token-normalised part's
  // The routers' losses (a model with experts), each micro-batch's weighted by its share of
  // the step's units.
  double aux_loss = 0, z_loss = 0;
  std::vector<double> metrics;  // the objective's, in Objective::metric_names() order
  // Per sparse layer, each expert's share of routed tokens, the mean over this rank's
  // micro-batches: this rank's own, not summed over the ranks.
  std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load;
};

// What step 3 of run() did.
struct Trainer::StepUpdate {
  double lr = 0;
  double grad_norm = std::nan("");  // not computed for a skipped step
  double loss_scale = 0;            // the fp16 loss scale the step used (0: no loss scaling)
  bool found_inf = false;           // inf/NaN gradients
  bool skipped = false;             // no update: found_inf or a non-finite loss
};

namespace {

// The wire order of a step's figures in their all-reduce (StepSync::sum): one pack and one
// unpack each, so that no index means a figure anywhere else.
std::vector<double> pack(const Trainer::StepCounts& c) { return {c.units, c.token_units, c.target_tokens, c.input_tokens}; }
void unpack(const std::vector<double>& v, Trainer::StepCounts& c) {
  c.units = v[0], c.token_units = v[1], c.target_tokens = v[2], c.input_tokens = v[3];
}
std::vector<double> pack(const Trainer::StepSums& s) {
  std::vector<double> v = {s.loss, s.token_loss, s.aux_loss, s.z_loss};
  v.insert(v.end(), s.metrics.begin(), s.metrics.end());
  return v;
}
void unpack(const std::vector<double>& v, Trainer::StepSums& s) {
  s.loss = v[0], s.token_loss = v[1], s.aux_loss = v[2], s.z_loss = v[3];
  s.metrics.assign(v.begin() + 4, v.end());
}
std::vector<double> pack(const ObjectiveSums& s) {
  std::vector<double> v = {s.loss, s.units, s.token_loss, s.token_units, static_cast<double>(s.target_tokens)};
  v.insert(v.end(), s.metrics.begin(), s.metrics.end());
  return v;
}
void unpack(const std::vector<double>& v, ObjectiveSums& s) {
  s.loss = v[0], s.units = v[1], s.token_loss = v[2], s.token_units = v[3], s.target_tokens = static_cast<std::int64_t>(v[4]);
  s.metrics.assign(v.begin() + 5, v.end());
}

// `figures` summed over the ranks, in place.
template <typename Figures>
void sum_over_ranks(StepSync& sync, Figures& figures) {
  std::vector<double> wire = pack(figures);
  sync.sum(wire);
  unpack(wire, figures);
}

}  // namespace

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
    std::vector<TensorBatch> micro;
    const StepCounts counts = next_micro_batches(micro);

    // 2. Forward and backward per micro-batch, then the step's mean loss.
    StepSums sums = forward_backward(micro, counts, step, scaler);
    ObjectiveSums step_sums;
    step_sums.loss = sums.loss;
    step_sums.units = counts.units;
    step_sums.token_loss = sums.token_loss;
    step_sums.token_units = counts.token_units;
    const double loss = mean_loss(step_sums);

    // 3. The update (none for a non-finite loss or gradient); too many non-finite losses in a
    //    row stop the run.
    const StepUpdate update = update_weights(step, loss, scaler);
    nonfinite_in_a_row = std::isfinite(loss) ? 0 : nonfinite_in_a_row + 1;
    if (update.skipped) {
      ++result.skipped_steps;
      log_skipped_step(step + 1, loss, update.found_inf, scaler);
    }
    // 4. Report.
    StepMetrics m = step_record(step, loss, counts, sums, update, step_start, start);
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
    std::optional<ops::MemoryPhase> phase(std::in_place, "evaluation");
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

// With several ranks, the counts are the whole global batch's (every rank's rows).
Trainer::StepCounts Trainer::next_micro_batches(std::vector<TensorBatch>& micro) {
  StepCounts counts;
  for (std::int64_t i = 0; i < options_.grad_accum; ++i) {
    RECORD_USER_SCOPE(ops::region::kData);
    micro.push_back(train_.next());
    counts.units += objective->units(micro.back());
    counts.token_units += objective->token_units(micro.back());
    counts.target_tokens += static_cast<double>(micro.back().target_tokens);
    counts.input_tokens += static_cast<double>(micro.back().input_ids.numel());
  }
  sum_over_ranks(sync(), counts);
  return counts;
}

// Per micro-batch: the objective's loss sum / the step's units (times the loss scale under
// fp16), backward. A model with experts adds aux_loss_coef times the routers' load-balancing
// loss and router_z_loss_coef times their z-loss, each micro-batch's weighted by its share of
// the step's units.
Trainer::StepSums Trainer::forward_backward(const std::vector<TensorBatch>& micro, const StepCounts& counts, std::int64_t step,
                                            GradScaler& scaler) {
  const double units = counts.units, token_units = counts.token_units;
  const double loss_scale = scaler.scale();
  const auto names = objective->metric_names();
  StepSums sums;
  sums.metrics.assign(names.size(), 0.0);
  for (const auto& batch : micro) {
    std::optional<ops::MemoryPhase> phase(std::in_place, "forward");
    const ObjectiveTerms terms = objective->forward(model_, batch);
    sums.loss += terms.loss_sum.item<double>();
    if (terms.token_loss_sum.defined()) sums.token_loss += terms.token_loss_sum.item<double>();
    for (std::size_t i = 0; i < names.size() && i < terms.metric_sums.size(); ++i) sums.metrics[i] += terms.metric_sums[i];
    const double share = units > 0 ? objective->units(batch) / units : 0.0;
    const double weight = share * loss_scale;
    const RouterLosses router = router_losses(model_, options_.aux_loss_coef * weight, options_.router_z_loss_coef * weight);
    sums.aux_loss += share * router.aux;
    sums.z_loss += share * router.z;
    accumulate_load(sums.expert_load, expert_load(model_), 1.0 / static_cast<double>(micro.size()));
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
  sum_over_ranks(sync(), sums);
  return sums;
}

// Gradients summed over ranks (one process: as they are); unscaled and checked, clipped, the
// update at the scheduled learning rate, gradients cleared. A step with a non-finite loss or
// gradient applies no update (fp16: the scale backs off).
Trainer::StepUpdate Trainer::update_weights(std::int64_t step, double loss, GradScaler& scaler) {
  StepUpdate update;
  update.loss_scale = scaler.enabled() ? scaler.scale() : 0.0;
  std::optional<ops::MemoryPhase> phase(std::in_place, "gradient reduction");
  sync().reduce_gradients(optimizer_.groups());
  if (sample_memory) sample_memory();
  phase.emplace("optimizer step");
  std::vector<double> inf_found = {scaler.unscale_and_check(optimizer_.groups()) ? 1.0 : 0.0};
  sync().sum_over_shards(inf_found);
  update.found_inf = inf_found[0] > 0;
  update.skipped = update.found_inf || !std::isfinite(loss);
  update.lr = learning_rate(options_.schedule, step);
  if (!update.skipped) {
    std::vector<double> norm_sq = {squared_grad_norm(optimizer_.groups())};
    sync().sum_over_shards(norm_sq);
    update.grad_norm = std::sqrt(norm_sq[0]);
    clip_gradients(optimizer_.groups(), options_.clip_grad_norm, update.grad_norm);
    optimizer_.step(update.lr);
  }
  scaler.update(update.found_inf);
  log_memory(step + 1, "after the update");
  optimizer_.zero_grad();
  return update;
}

// The step's record: its figures, speed, memory and the batch source's own figures. Takes the
// expert load out of `sums`.
StepMetrics Trainer::step_record(std::int64_t step, double loss, const StepCounts& counts, StepSums& sums, const StepUpdate& update,
                                 std::chrono::steady_clock::time_point step_start, std::chrono::steady_clock::time_point start) {
  StepMetrics m{step + 1, loss, update.lr, update.grad_norm, static_cast<std::int64_t>(counts.target_tokens)};
  measure(m, static_cast<std::int64_t>(counts.input_tokens), step_start, start);
  m.skipped = update.skipped;
  m.loss_scale = update.loss_scale;
  if (!sums.expert_load.empty()) {
    m.aux_loss = sums.aux_loss;
    m.z_loss = sums.z_loss;
    m.expert_load = std::move(sums.expert_load);
  }
  m.objective = metric_means(*objective, sums.metrics, counts.units, counts.token_units);
  for (auto& figure : train_.figures()) m.objective.push_back(std::move(figure));
  return m;
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
  ObjectiveSums all = evaluate_objective(*objective, model_, eval_, stage);
  sum_over_ranks(sync(), all);
  EvalMetrics e{step, mean_loss(all), all.target_tokens};
  e.objective = metric_means(*objective, all.metrics, all.units, all.token_units);
  if (eval_source) {
    const auto figures = eval_source->figures();
    e.objective.insert(e.objective.end(), figures.begin(), figures.end());
  }
  e.token_loss = objective->token_loss();
  return e;
}

}  // namespace ctune::train
