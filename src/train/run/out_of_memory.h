// Running out of memory during training, explained in one line (docs/planning.md, "Running out
// of memory"): the phase it happened in (forward of layer N, backward, optimizer step,
// checkpoint...), what was in use against what the memory ledger predicted, and, added by
// `ctune train` (cli/cmd_train.cpp, which can plan), the plan that would fit. Also a run refused
// before it starts, when the ledger predicts more than the process can hold.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "train/forecast/memory_ledger.h"

namespace ctune::train {

struct OutOfMemoryFacts {
  std::string phase;               // ops::memory_phase_text() when it happened
  std::int64_t requested = 0;      // the refused allocation (0: unknown, the device's allocator refused)
  std::int64_t in_use = 0;         // in use then: the refusal's record, else the peak since training began
  std::int64_t limit = 0;          // memory.limit (0: none; the system refused)
  std::int64_t capacity = 0;       // what the device has for this rank (the budget a plan must fit when no limit is set)
  std::string capacity_source;     // what sets it (ops::HostCapacity::source on the CPU)
  bool predicted_only = false;     // refused before the run, on the ledger's prediction alone
  std::int64_t predicted_peak = 0; // the ledger's (0: not estimated yet)
  std::string largest_line;        // the ledger's largest line but the runtime, and its bytes
  std::int64_t largest_bytes = 0;
  std::int64_t runtime = 0;        // the ledger's runtime line (what the process held before the model)
};

// The facts of an out-of-memory failure now: the phase and the allocator's record (ops/memory_phase.h),
// the ledger that was predicted (null before there is one); `ranks_here`: the ranks sharing this
// machine's memory (distributed::World::local_size), each of which may hold its share.
OutOfMemoryFacts out_of_memory_facts(const at::Device& device, std::int64_t limit, const Ledger* ledger, int ranks_here);

class OutOfMemory : public MemoryError {
 public:
  // `advice` follows the facts on the line: "; a plan that fits ...".
  explicit OutOfMemory(OutOfMemoryFacts facts, const std::string& advice = "");
  const OutOfMemoryFacts& facts() const { return facts_; }
  // The budget a plan must fit: the limit, else the device's capacity.
  std::int64_t budget() const { return facts_.limit > 0 ? facts_.limit : facts_.capacity; }

 private:
  OutOfMemoryFacts facts_;
};

}  // namespace ctune::train
