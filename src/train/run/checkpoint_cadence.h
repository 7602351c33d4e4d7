// When a run checkpoints and how: every checkpoint.every_n_steps and at the plan's last step,
// once more when a signal stops it (unless that step's is already written), whole or sharded
// (checkpoint.layout, train/state/checkpoint.h), with report.html rewritten after each and every
// rank meeting at a barrier after each write. Session::run asks it after every step.
#pragma once

#include <cstdint>

#include "distributed/comm.h"
#include "model/decoder.h"
#include "train/parallel/data_parallel.h"
#include "train/run/run_plan.h"
#include "train/state/checkpoint.h"

namespace ctune::train {

class CheckpointCadence {
 public:
  // `last_written`: the step of the checkpoint the run resumed from (-1: none). Everything
  // referred to outlives the cadence.
  CheckpointCadence(const RunPlan& plan, CheckpointManager& manager, CheckpointSources& sources, DataParallel& parallel,
                    model::CausalLM& model, distributed::Comm& comm, std::int64_t last_written);

  // After `step`: a checkpoint when the cadence or the last step says so.
  void after_step(std::int64_t step);
  // A checkpoint of `step` unless the last one written is it (a stop, the end of the run).
  void ensure(std::int64_t step);
  // report.html (rank 0): a report that cannot be written costs a warning, never the run.
  void write_report() const;

 private:
  void write(std::int64_t step);

  const RunPlan& plan_;
  CheckpointManager& manager_;
  CheckpointSources& sources_;
  DataParallel& parallel_;
  model::CausalLM model_;
  distributed::Comm& comm_;
  std::int64_t last_written_;
};

}  // namespace ctune::train
