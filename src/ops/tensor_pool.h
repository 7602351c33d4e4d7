// memory.allocator: fast (the default): ctune's allocator for CPU tensors of 256 KiB and more
// (activations, gradients, logits chunks, optimizer temporaries). Freed tensors keep their pages,
// so a training step, which allocates the sizes of the step before, reuses memory instead of
// mapping fresh pages that the kernel zero-fills one fault at a time (memory.allocator: exact,
// 5-9x slower steps on the measured machine). A request takes the smallest free range that holds
// it, split in place; freed ranges join their free neighbours. Only a request no free range
// holds maps fresh pages, and before it does the pool returns free ranges (the smallest first)
// until what it holds stays within 1/kPoolSlackDivisor of the most its live tensors have held. So, by
// construction, the pool's resident bytes never exceed (1 + 1/kPoolSlackDivisor) x the peak of its live
// tensors' bytes (rounded up to pages): the memory ledger's allocator line is that bound, derived
// from the policy, not a reserve fitted on a grid (docs/formats.md, "The allocator").
// Moving freed pages side by side to serve a larger request (mremap) was tried and dropped: on
// the measured virtual machine a moved page costs the next step dearly (full bf16 step +25%,
// in time no process is charged for).
// Smaller blocks stay with glibc, whose own mappings start at the same 256 KiB.
#pragma once

#include <cstdint>

namespace ctune::ops {

inline constexpr std::int64_t kPooledBytes = 256 * 1024;  // tensors from this size on are pooled
inline constexpr std::int64_t kPoolPageBytes = 4096;      // a pooled tensor takes whole pages
inline constexpr std::int64_t kPoolSlackDivisor = 20;    // held <= (1 + 1/20) x the live peak

// Installs the pool as LibTorch's CPU allocator (tensors allocated before keep their allocator).
void use_tensor_pool();

// The pool as LibTorch's CPU allocator for a scope, the allocator before it restored after
// (tensors keep the allocator that made them, so they may outlive the scope).
class TensorPoolScope {
 public:
  TensorPoolScope();
  ~TensorPoolScope();
  TensorPoolScope(const TensorPoolScope&) = delete;
  TensorPoolScope& operator=(const TensorPoolScope&) = delete;

 private:
  void* before_;  // the c10::Allocator in place when the scope began
};

// memory.allocator: exact: glibc maps every block of kExactMappedBytes and more and unmaps it when
// it is freed, so resident memory follows live tensors, at the cost of a page fault per page of
// every such tensor every step. Blocks below it stay in glibc's arenas, whose holes are not
// returned: at 256 KiB a LoRA bf16 step on the SmolLM2-135M shape left 46-68 MB resident between
// steps and peaked 5.4% over the ledger; at 64 KiB 30-32 MB and 3.0%, for 38% slower steps.
inline constexpr std::int64_t kExactMappedBytes = 64 * 1024;
void use_exact_allocator();

// memory.allocator as a run's plan says: exact, or the pool (fast).
void use_allocator(bool exact);

// Returns every free range (and glibc's free heap) to the system and restarts the peaks from the
// live bytes now. Training calls it once its model and data are built: what loading freed (an
// fp32 file cast to bf16, a base quantised to nf4) would otherwise stay held, and the bound of a
// live peak that loading, not the step, set.
void release_free_memory();

// memory.limit on the CPU (set_memory_limit in ops/memory.h): fresh pages that would take the
// process's resident memory past `bytes` are refused with c10::OutOfMemoryError, after every
// free range has been returned; 0: no limit. Only fresh pages are checked (a step from the
// second on rarely maps any), so the check costs nothing once a run is warm.
void set_pool_limit(std::int64_t bytes);

struct TensorPoolStats {
  std::int64_t live_bytes = 0;       // pooled bytes in live tensors
  std::int64_t free_bytes = 0;       // pooled bytes freed and kept, resident
  std::int64_t peak_live_bytes = 0;  // the most live_bytes has been
  std::int64_t peak_held_bytes = 0;  // the most live_bytes + free_bytes has been (<= (1 + 1/kPoolSlackDivisor) x peak_live_bytes)
  std::int64_t in_place = 0;         // requests served by a free range (split in place)
  std::int64_t fresh_bytes = 0;      // bytes mapped fresh (zero-filled on first touch)
  std::int64_t released_bytes = 0;   // free bytes returned to the system to stay within the slack
};
TensorPoolStats tensor_pool_stats();

}  // namespace ctune::ops
