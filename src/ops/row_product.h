// One row times a weight (a decoding step's projections and head, batch 1) on the calling thread
// and a pool of workers, where the caller never waits for a worker that the scheduler took off
// its core. OpenMP's fork and join waits at every region for every thread; a step of batch-1
// decode is hundreds of short products, so beside a CPU-bound neighbour each region waited for
// a scheduler slice (0.26x of the quiet rate, docs/performance.md "Beside a neighbour"). Here
// the rows are taken in chunks, the caller from the front and the workers from the back; a
// worker computes a chunk into its own buffer and publishes it only if the caller has not taken
// it back; the caller, out of chunks, recomputes any chunk a worker holds for longer than a
// chunk takes. A row is the same fixed
// sum whoever computes it (cpu_kernels.h, DotRowsFn), so the result does not depend on the
// schedule.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ctune::ops {

// Whether row_product takes these operands: CPU, x one fp32 row (contiguous), w [N, K] fp32 or
// bf16 with contiguous rows, nothing that autograd must record.
bool row_product_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// y [N] fp32 = w [N, K] · x [K] (+ bias [N], added in fp32).
at::Tensor row_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// Tests: while alive, every worker sleeps `micros` in the middle of each chunk it takes (a
// descheduled worker), and row_product_chunks_taken_back() counts the chunks the caller
// recomputed. Not thread-safe against running products.
class RowProductStall {
 public:
  explicit RowProductStall(std::int64_t micros);
  ~RowProductStall();
  RowProductStall(const RowProductStall&) = delete;
  RowProductStall& operator=(const RowProductStall&) = delete;
};
std::int64_t row_product_chunks_taken_back();

}  // namespace ctune::ops
