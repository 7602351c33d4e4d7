// The training loop. It reads top to bottom like the step it runs:
//   micro-batches -> forward -> the objective's summed loss -> backward (normalised by the
//   step's units: target tokens, or pairs) -> clip -> optimizer step at the scheduled lr -> log
//   -> maybe evaluate.
// Techniques (LoRA, precision, checkpointing, quantised bases) plug in around it: through the
// model, the optimizer's parameter groups and the hooks below, never by copying the loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/json.h"
#include "model/decoder.h"
#include "train/observe/metrics.h"
#include "train/observe/profiler.h"
#include "train/step/grad_scaler.h"
#include "train/step/loss.h"
#include "train/step/objective.h"
#include "train/step/optimizer.h"
#include "train/step/schedule.h"

namespace ctune::train {

// What a batch source holds between steps that the data cursor cannot rebuild (online RL: a
// generation batch that serves further steps), for the checkpoint; empty: nothing.
struct SourceState {
  Json note;  // null: nothing held
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// Where training batches come from (the data layer's sampler, wrapped).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual TensorBatch next() = 0;
  // What producing the current step's batches measured (online RL: rewards, completion lengths,
  // generation time), reported with the step's metrics; empty for a dataset.
  virtual std::vector<std::pair<std::string, double>> figures() const { return {}; }
  // Between steps: what the checkpoint must carry for the next step to be the one an
  // uninterrupted run takes, and, on resume, that state put back.
  virtual SourceState state() const { return {}; }
  virtual void restore(const SourceState& /*state*/) {}
};

// Evaluation batches made anew at each evaluation (online RL: the current policy's completions
// of the eval prompts), with what making them measured (rewards, lengths), which join the eval
// record. A trainer without one evaluates its fixed eval batches.
class EvalSource {
 public:
  virtual ~EvalSource() = default;
  virtual std::vector<TensorBatch> batches() = 0;
  // The latest batches' figures (reported as eval_NAME).
  virtual std::vector<std::pair<std::string, double>> figures() const = 0;
};

// How the ranks of a data-parallel run agree at each step (train/parallel/data_parallel.h). Each rank
// trains on its rows of the global batch; these make the result what one process would compute
// on the whole batch. The base class is a world of one process: nothing to agree on.
class StepSync {
 public:
  virtual ~StepSync() = default;
  // In place: each value summed over all ranks (target counts, loss sums, token counts).
  virtual void sum(std::vector<double>& /*values*/) {}
  // The gradients of the trainable parameters, summed over all ranks (into the optimizer's
  // parameters: the model's own, or this rank's shard of them).
  virtual void reduce_gradients(const std::vector<ParamGroup>& /*groups*/) {}
  // In place: figures computed over the optimizer's parameters (squared gradient norm, inf/NaN
  // found) made global; only a sharded optimizer holds a part of them.
  virtual void sum_over_shards(std::vector<double>& /*values*/) {}
  // The stop signal every rank acts on (the highest any rank received; 0: none), so all ranks
  // stop after the same step.
  virtual int agree_on_stop(int signal) { return signal; }
};

struct TrainerOptions {
  std::int64_t max_steps = 1;
  std::int64_t grad_accum = 1;
  double clip_grad_norm = 0;  // 0: no clipping
  std::int64_t eval_every = 0;  // 0: only at the end
  std::int64_t log_every = 1;
  bool chunked_loss = true;  // memory.chunked_loss
  double aux_loss_coef = 0;  // moe.aux_loss_coef: the routers' load-balancing loss weight
  double router_z_loss_coef = 0;  // moe.router_z_loss_coef: the routers' z-loss weight
  std::int64_t first_step = 0;  // steps already done (a resumed run starts after them)
  std::int64_t max_nonfinite_steps = 10;  // abort after this many non-finite losses in a row
  at::Device device = at::kCPU;  // where the model lives: whose memory a step's peak is
  ScheduleOptions schedule;
};

struct TrainResult {
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // steps without an update (non-finite loss or gradients)
  double last_loss = 0;
  std::optional<double> final_eval_loss;
  double seconds = 0;
};

class Trainer {
 public:
  // `metrics`: where step and eval records go, with a progress line on stderr; null on the
  // ranks of a multi-process run that do not report (rank 0 does).
  Trainer(model::CausalLM model, Optimizer& optimizer, BatchSource& train, std::vector<TensorBatch> eval,
          TrainerOptions options, MetricsLog* metrics);

  TrainResult run();
  // A step's figures (trainer.cpp): what it counts before any forward (its normalisers), what
  // its forwards sum, each summed over the ranks in one all-reduce; what its update did.
  struct StepCounts;
  struct StepSums;
  struct StepUpdate;
  // The objective over the eval batches (each rank's share, combined over ranks); `stage`
  // shows its progress.
  EvalMetrics evaluate(std::int64_t step, Stage* stage = nullptr);

  // What a step minimises (step/objective.h); the constructor sets next-token SFT.
  std::shared_ptr<Objective> objective;

  // Called after every optimizer step with the step number (1-based): checkpoints hook here.
  std::function<void(std::int64_t step)> on_step_end;
  // Called when SIGTERM/SIGINT asked the run to stop (core/stop_signal.h), after the last
  // complete step (`step`, 0 when none was taken yet): saves it and throws StoppedError.
  std::function<void(std::int64_t step, int signal)> on_stop;
  // fp16 loss scaling; null: none (gradients are still checked for inf/NaN).
  GradScaler* scaler = nullptr;
  // The other ranks of a data-parallel run; null: this process alone.
  StepSync* step_sync = nullptr;
  // Called where parameters, gradients and optimizer state peak (after each backward, and after
  // the gradients are reduced): a memory meter hooks here.
  std::function<void()> sample_memory;
  // logging.profile: times each step by category (train/observe/profiler.h); null: not profiled.
  StepProfiler* profiler = nullptr;
  // Where the eval batches come from at each evaluation; null: the fixed ones given.
  EvalSource* eval_source = nullptr;

 private:
  // Steps 1 to 4 of run(), in its order.
  StepCounts next_micro_batches(std::vector<TensorBatch>& micro);
  StepSums forward_backward(const std::vector<TensorBatch>& micro, const StepCounts& counts, std::int64_t step, GradScaler& scaler);
  StepUpdate update_weights(std::int64_t step, double loss, GradScaler& scaler);
  StepMetrics step_record(std::int64_t step, double loss, const StepCounts& counts, StepSums& sums, const StepUpdate& update,
                          std::chrono::steady_clock::time_point step_start, std::chrono::steady_clock::time_point start);
  // Step 4 of run(): the step's speed, memory and times into `m`.
  void measure(StepMetrics& m, std::int64_t input_tokens, std::chrono::steady_clock::time_point step_start,
               std::chrono::steady_clock::time_point start);
  // Step 5 of run(): the eval split's loss after `step` when the cadence or the last step says so.
  void evaluate_on_cadence(std::int64_t step, Progress* progress, TrainResult& result);
  void stop_if_requested(std::int64_t step, bool nothing_new);
  StepSync& sync();
  StepProfiler& profiler_or_none();

  model::CausalLM model_;
  Optimizer& optimizer_;
  BatchSource& train_;
  std::vector<TensorBatch> eval_;
  TrainerOptions options_;
  MetricsLog* metrics_;
};

}  // namespace ctune::train
