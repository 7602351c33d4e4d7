// What a run measured about its memory, next to what the ledger predicted
// (train/forecast/memory_ledger.h): the resident peak of the process, and the bytes of parameters,
// gradients and optimizer state this rank held at their peak, measured by walking the tensors
// themselves (so it shows whether sharding really divides them, apart from activations and the
// heap). Reported in the log and as the last line of metrics.jsonl.
#pragma once

#include <cstdint>

#include "core/json.h"
#include "model/decoder.h"
#include "train/forecast/memory_ledger.h"
#include "train/observe/metrics.h"
#include "train/step/optimizer.h"

namespace ctune::train {

class StateMeter {
 public:
  StateMeter(model::CausalLM model, const Optimizer& optimizer) : model_(std::move(model)), optimizer_(optimizer) {}
  // Bytes held now by the model's parameters and gradients, the optimizer's parameters (a
  // sharded optimizer's chunks) and gradients, and its state, each storage counted once; the
  // high-water mark is kept. Called where they peak: after each backward, and under full_shard
  // while a part is whole in backward. Not during checkpoint writes (docs/distributed.md).
  void sample();
  std::int64_t peak() const { return peak_; }

 private:
  model::CausalLM model_;
  const Optimizer& optimizer_;
  std::int64_t peak_ = 0;
};

// Logs predicted against measured memory of the steps and returns the {"memory": ...} record.
// `device`: where the model lives, whose memory is measured (train/observe/metrics.h memory_now).
Json report_memory(const Ledger& ledger, std::int64_t start_bytes, const StateMeter& meter, const at::Device& device);

// Once the result is written: logs the whole run's peak (`run_peak`: the largest rank's, the
// final checkpoint and the result included, which is what the ledger's peak counts; the steps'
// peak misses the gathers after the last step) against the prediction, adds it to `record` as
// measured_run_peak_bytes and writes the record, the last line of metrics.jsonl.
void write_memory_record(Json record, const Ledger& ledger, std::int64_t run_peak, bool distributed, MetricsLog& metrics);

}  // namespace ctune::train
