// What a run measured about its memory, next to what the ledger predicted
// (train/observe/memory_ledger.h): the resident peak of the process, and the bytes of parameters,
// gradients and optimizer state this rank held at their peak, measured by walking the tensors
// themselves (so it shows whether sharding really divides them, apart from activations and the
// heap). Reported in the log and as the last line of metrics.jsonl.
#pragma once

#include <cstdint>

#include "model/llama.h"
#include "train/observe/memory_ledger.h"
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

// Logs predicted against measured memory and writes the {"memory": ...} record.
// `device`: where the model lives, whose memory is measured (train/observe/metrics.h memory_now).
void report_memory(const Ledger& ledger, MetricsLog& metrics, std::int64_t start_bytes, const StateMeter& meter,
                   const at::Device& device);

}  // namespace ctune::train
