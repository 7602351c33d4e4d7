#include "train/run/checkpoint_cadence.h"

#include <spdlog/spdlog.h>

#include "report/html_report.h"

namespace ctune::train {

CheckpointCadence::CheckpointCadence(const RunPlan& plan, CheckpointManager& manager, CheckpointSources& sources, DataParallel& parallel,
                                     model::CausalLM& model, distributed::Comm& comm, std::int64_t last_written)
    : plan_(plan), manager_(manager), sources_(sources), parallel_(parallel), model_(model), comm_(comm), last_written_(last_written) {}

void CheckpointCadence::after_step(std::int64_t step) {
  const auto every = plan_.checkpoint.every_n_steps;
  if ((every > 0 && step % every == 0) || step == plan_.trainer.max_steps) write(step);
}

void CheckpointCadence::ensure(std::int64_t step) {
  if (last_written_ != step) write(step);
}

void CheckpointCadence::write_report() const {
  if (comm_.rank() != 0) return;
  try {
    report::write_report(plan_.output_dir);
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
}

// A sharded checkpoint holds each rank's part, written by that rank. A whole one is rank 0's:
// the weights are whole on every rank (gathered under full_shard) and every rank takes part in
// gathering the optimizer state.
void CheckpointCadence::write(std::int64_t step) {
  if (plan_.checkpoint.sharded) {
    manager_.write_sharded(step, sources_, plan_.model_config,
                           {parallel_.state_shard(model_), parallel_.shard_index, parallel_.shard_count}, comm_);
  } else {
    sources_.optimizer_state = parallel_.optimizer->state();
    parallel_.with_whole_model([&] {
      if (comm_.rank() == 0) manager_.write(step, sources_);
    });
    sources_.optimizer_state.clear();
  }
  write_report();
  comm_.barrier("waiting for rank 0 to write a checkpoint");
  last_written_ = step;
}

}  // namespace ctune::train
