// Where a training step's time goes (logging.profile; docs/performance.md): every ATen operator
// and autograd node the step runs on the training thread is timed through ATen's
// RecordFunction callbacks, and its self time (its own time minus that of the operators it
// called) is charged to one category:
//   matmul forward / matmul backward   GEMMs (mm, addmm, bmm ...) of the projections and head
//   attention                          everything in the attention core, its GEMMs included
//   norms, RoPE, activation (GLU)      their kernels, forward and backward
//   loss                               the chunked cross entropy but its GEMMs
//   recompute                          a checkpointed block's second forward
//   element-wise                       every other arithmetic operator (residual adds, LoRA's scale ...)
//   copies and casts                   copy_, to, contiguous, cat ...
//   allocation                         empty, zeros ... (page faults show as system time)
//   optimizer                          unscale, gradient norm, clipping, the update, zeroing
//   dequantise, collectives, data      their regions
//   untracked                          the step's wall time that no operator covers (the loop
//                                      itself, the autograd engine between nodes)
// The regions are marked by ops/profile_regions.h. The categories add up to the step's wall
// time by construction (untracked is the remainder). Off, nothing is installed and the step
// pays nothing; on, each operator costs about a microsecond more. The GEMMs' FLOPs are counted
// from their input shapes (docs/performance.md#seeing-it-loggingprofile).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctune::train {

// One step: seconds per category, in the table's order (categories with no time left out), and
// the floating-point operations its GEMMs executed (2 m n k per mm/addmm, per batch for bmm...),
// counted from the shapes each call received: what ran, not what a formula expects.
struct StepProfile {
  std::vector<std::pair<std::string, double>> seconds;
  double gemm_flops = 0;            // every GEMM of the step, attention's included
  double projection_gemm_flops = 0;  // those of the matmul categories: projections, experts, head
  bool empty() const { return seconds.empty(); }
};

class StepProfiler {
 public:
  // Inactive: begin/end do nothing and return nothing.
  StepProfiler();
  // Active: listens to RecordFunction on the calling thread. Steps first_trace_step ..
  // first_trace_step + trace_steps - 1 are also written as a Chrome trace (Perfetto,
  // chrome://tracing) to trace_path when the last of them ends.
  StepProfiler(std::filesystem::path trace_path, std::int64_t first_trace_step, std::int64_t trace_steps);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  bool active() const { return state_ != nullptr; }
  void begin_step(std::int64_t step);
  // The step's categories; `wall_s` is its measured duration (the untracked remainder).
  StepProfile end_step(double wall_s, std::int64_t input_tokens);
  // Writes the trace of a window the run ended inside (fewer steps than it spans).
  void finish();
  // Median seconds per step of each category over the steps profiled after the first (the first
  // warms caches and the allocator), and per input token, as a table for the log.
  std::string table() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::vector<StepProfile> steps_;
  std::vector<double> tokens_;
};

}  // namespace ctune::train
