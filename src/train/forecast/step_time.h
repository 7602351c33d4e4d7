// The step-time model (docs/planning.md): what one optimizer step costs on this machine, term by
// term, from the same inputs as the memory ledger: the GEMM FLOPs of forward, backward and
// recomputation as the method trains each weight, attention's FLOPs over the causal (or
// windowed) context, the memory traffic of the element-wise work and the loss, the
// dequantisation of an int8/nf4 base, the optimizer's pass over its state, the collectives of the
// sharding strategy and offload's copies, each divided by a rate measured on this machine
// (train/forecast/machine.h). It ranks plans; it is not a profiler (logging.profile measures).
#pragma once

#include <string>
#include <vector>

#include "distributed/world.h"
#include "train/forecast/machine.h"
#include "train/forecast/memory_ledger.h"

namespace ctune::train {

struct StepTime {
  struct Line {
    std::string name;
    double seconds = 0;
    std::string formula;  // what it counts, in words and symbols
  };
  std::vector<Line> lines;
  double step_seconds = 0;     // one optimizer step (grad_accum micro-batches), every line summed
  double tokens_per_step = 0;  // over all ranks (row tokens, padding included)
  double tokens_per_second() const { return step_seconds > 0 ? tokens_per_step / step_seconds : 0; }
  std::string to_text() const;
};

// `world`: the ranks and how many share a machine; `shared_cores`: the device is the CPU, so
// the ranks of one machine share the cores the rates were measured with.
StepTime estimate_step_time(const LedgerInputs& in, const distributed::World& world, const MachineRates& rates, bool shared_cores);

}  // namespace ctune::train
