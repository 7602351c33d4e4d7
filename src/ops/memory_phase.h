// What the process is doing, for the one line that explains running out of memory
// (train/run/session.cpp, docs/planning.md "Running out of memory"): the training loop marks its
// phases (forward, backward, optimizer step, checkpoint...), the decoder marks the layer its
// forward is in, and the allocator that refuses a tensor notes what was asked and what was in
// use. The state is one process-wide record, not per thread: the phases are the training
// thread's, and OpenMP workers allocate within them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ctune::ops {

// Marks a phase for its lifetime ("forward", "backward", "optimizer step", "checkpoint");
// the phase it replaced comes back when it ends, unless it ends by an exception: then the phase
// stays, so that the handler that explains the failure reads where it happened. `what` must
// outlive it (a literal).
class MemoryPhase {
 public:
  explicit MemoryPhase(const char* what);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  const char* previous_;
  int exceptions_;  // std::uncaught_exceptions() when it began
};

void set_memory_phase_step(std::int64_t step);    // the training step under way (1-based; 0: none)
// The part of the decoder a forward is in: a layer's index, or one of these.
inline constexpr std::int64_t kPhaseEmbedding = -1;
inline constexpr std::int64_t kPhaseHead = -2;  // the final norm, the head and the loss
void set_memory_phase_layer(std::int64_t layer);

// "step 3, forward of layer 5", "step 3, optimizer step", "loading the model".
std::string memory_phase_text();
// Whether a phase or a step is set (training, or a command that names its phases).
bool memory_phase_known();

// An allocation the memory limit (or the system) refused: what it asked for, what was in use
// then (the memory memory_now counts) and the limit (0: none, the system refused).
struct RefusedAllocation {
  std::int64_t requested = 0;
  std::int64_t in_use = 0;
  std::int64_t limit = 0;
};
void note_refused_allocation(const RefusedAllocation& refused);
std::optional<RefusedAllocation> last_refused_allocation();

}  // namespace ctune::ops
