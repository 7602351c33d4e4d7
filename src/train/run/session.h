// A training run from its plan to its artefacts, behind one object: `ctune train` parses its
// arguments and calls Session(plan, options).run().
//
// The session owns the order of things: the run directory (never "/", the home directory, a
// directory holding the run's inputs or a non-empty directory that is not a ctune run; locked
// against a second writer; fresh, replaced with --overwrite, or continued with --resume), the
// checkpoint to resume from (found and verified; its recipe and the identity of its inputs
// checked against this run), the model and optimizer (from that checkpoint's weights when
// resuming), the data, the restored state (step, optimizer, loss scale, data cursor, RNG), the
// training loop with step checkpoints, and the result in the method's layout. SIGTERM and
// SIGINT end the run after the current step with a checkpoint (core/stop_signal.h).
//
// With several ranks (dist/comm.h) every rank builds the model, restores the checkpoint and
// trains on its rows of each global batch (train/parallel/data_parallel.h); rank 0 alone owns the run
// directory: it locks and prepares it, writes logs, metrics, checkpoints and the result, and
// the others wait for it at a barrier after each of those writes. A sharded checkpoint
// (checkpoint.layout) has every rank write its part before rank 0 writes the manifest.
#pragma once

#include <filesystem>
#include <optional>

#include "distributed/comm.h"
#include "io/run_dir.h"
#include "train/forecast/memory_ledger.h"
#include "train/objective/kind.h"
#include "train/observe/metrics.h"
#include "train/parallel/data_parallel.h"
#include "train/run/out_of_memory.h"
#include "train/run/run_plan.h"
#include "train/state/checkpoint.h"

namespace ctune::train {

class CheckpointCadence;

struct SessionOptions {
  bool overwrite = false;              // replace the results of an earlier run in output_dir
  bool resume = false;                 // continue the run in output_dir
  std::filesystem::path resume_from;   // that checkpoint; empty: the newest complete one
  bool inputs_moved = false;           // resume although input paths changed (same content)
};

class Session {
 public:
  // Checks the options against the run directory (rank 0); nothing is written yet. `comm`
  // joins the ranks of plan.world and outlives the session.
  Session(RunPlan plan, SessionOptions options, distributed::Comm& comm);

  // Trains to the plan's last step and writes the result; returns what the loop reports.
  // Running out of memory throws OutOfMemory (train/run/out_of_memory.h).
  TrainResult run();

 private:
  void check_run_dir() const;
  std::optional<std::filesystem::path> find_resume_point() const;
  Json input_identities() const;
  void check_inputs(const Json& recorded, const Json& now, const std::filesystem::path& checkpoint) const;
  Json program_identities() const;
  void warn_if_programs_changed(const Json& recorded, const Json& now, const std::filesystem::path& checkpoint) const;
  void prepare_run_dir(const std::optional<std::filesystem::path>& resume_dir, std::int64_t resumed_step);
  // The steps of run(), in its order.
  struct ResumePoint {
    std::optional<std::filesystem::path> dir;  // the checkpoint resumed from
    std::optional<TrainingState> state;        // what it holds
  };
  TrainResult run_steps();
  // Parts of run_steps(), in its order.
  std::vector<TensorBatch> fixed_eval_batches() const;
  void restore_state(const ResumePoint& resume, Optimizer& optimizer, GradScaler& scaler, data::Sampler& sampler);
  CheckpointSources checkpoint_sources(model::CausalLM& lm, const WeightFiles& files, const data::Sampler& sampler, const GradScaler& scaler,
                                       const Json& inputs, const Json& programs, const BatchSource* own_source) const;
  [[noreturn]] void stop_after(CheckpointCadence& cadence, std::int64_t step, int signal) const;
  void log_communication(double seconds_before, const TrainResult& result) const;
  void start_process() const;
  void refuse_what_cannot_fit(const Ledger& ledger) const;
  void hold_to_address_space(OutOfMemoryFacts& facts) const;
  // Rank 0, before the run writes anything: its checkpoints and result past the disk's free
  // space (train/forecast/disk_need.h). `resumed`: the step of the checkpoint resumed from (-1: none).
  // Returns the line the plan's summary gets.
  std::string refuse_what_cannot_be_written(std::int64_t resumed) const;
  ResumePoint open_run_dir(std::optional<io::DirLock>& lock, const Json& inputs, const Json& programs);
  void refuse_if_nothing_learned(const TrainResult& result) const;
  std::shared_ptr<const ReferenceTable> precomputed_reference(model::CausalLM& lm, DataParallel& parallel, const ResumePoint& at) const;
  void verify_run_files(const ResumePoint& at) const;
  std::optional<ReferenceTable> stored_reference(std::uint64_t fingerprint, const ResumePoint& at) const;
  void write_result(model::CausalLM& lm, DataParallel& parallel, const WeightFiles& files);
  SourceContext source_context(model::CausalLM& lm, model::CausalLM& reference, data::Sampler& sampler, const ResumePoint& resume,
                               DataParallel& parallel) const;
  void write_samples(const BatchSource& source, std::int64_t step) const;
  // The run's peak, the largest over the ranks, its final checkpoint and result included:
  // logged, and with the steps' `record` (rank 0's) the memory line of metrics.jsonl.
  void report_run_peak(const Ledger& ledger, const std::optional<Json>& record, MetricsLog* metrics);

  bool writer() const { return comm_.rank() == 0; }

  RunPlan plan_;
  SessionOptions options_;
  distributed::Comm& comm_;
  std::optional<Ledger> ledger_;  // the memory this run should take, once estimated
};

}  // namespace ctune::train
