// A training run from its plan to its artefacts, behind one object: `ctune train` parses its
// arguments and calls Session(plan, options).run().
//
// The session owns the order of things: the run directory (fresh, replaced with --overwrite, or
// continued with --resume), the checkpoint to resume from (found and verified, its recipe
// checked against this one), the model and optimizer (from that checkpoint's weights when
// resuming), the data, the restored state (step, optimizer, loss scale, data cursor, RNG), the
// training loop with step checkpoints, and the result in the method's layout.
//
// Sharding will add ranks here: each rank restores and writes its own part of the state, one
// rank prepares the run directory and writes a checkpoint's manifest after all parts are down
// (CheckpointManager::write keeps that order: weights, state, manifest last).
#pragma once

#include <filesystem>
#include <optional>

#include "train/checkpoint.h"
#include "train/run_plan.h"

namespace ctune::train {

struct SessionOptions {
  bool overwrite = false;              // replace the results of an earlier run in output_dir
  bool resume = false;                 // continue the run in output_dir
  std::filesystem::path resume_from;   // that checkpoint; empty: the newest complete one
};

class Session {
 public:
  // Checks the options against the run directory; nothing is written yet.
  Session(RunPlan plan, SessionOptions options);

  // Trains to the plan's last step and writes the result; returns what the loop reports.
  TrainResult run();

 private:
  std::optional<std::filesystem::path> find_resume_point() const;
  void prepare_run_dir(std::int64_t resumed_step);

  RunPlan plan_;
  SessionOptions options_;
};

}  // namespace ctune::train
