#include "ops/tensor_pool.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include "ops/memory_phase.h"
#include "ops/resident.h"

namespace ctune::ops {

namespace {

constexpr std::size_t kPage = static_cast<std::size_t>(kPoolPageBytes);

std::size_t whole_pages(std::size_t n) { return (n + kPage - 1) / kPage * kPage; }

class TensorPool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n < kPooledBytes) {
      void* p = c10::alloc_cpu(n);
      return {p, p, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
    }
    void* p = take(n);
    return {p, p, &give_back, c10::Device(c10::DeviceType::CPU)};
  }
  // raw_allocate's blocks of either kind come back here (raw_deallocate keeps only the pointer).
  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

  static TensorPool& instance() {
    static TensorPool* pool = new TensorPool();  // never destroyed: tensors may outlive main()
    return *pool;
  }

  void trim() const {
    std::lock_guard<std::mutex> lock(mutex_);
    release_all_free();
    stats_.peak_live_bytes = stats_.peak_held_bytes = stats_.live_bytes;
  }

  TensorPoolStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void set_limit(std::int64_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
  }

 private:
  static void give_back(void* ptr) { instance().put(ptr); }

  void* take(std::size_t n) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t bytes = whole_pages(n);
    char* p = nullptr;
    if (auto fit = free_by_size_.lower_bound(bytes); fit != free_by_size_.end()) {
      // The smallest free range that holds it, of those the last freed (its pages most likely
      // still in cache): its head, the rest stays free. Every step from the second on is served
      // this way almost always.
      fit = std::prev(free_by_size_.upper_bound(fit->first));
      p = fit->second;
      const std::size_t have = fit->first;
      forget_free(fit);
      if (have > bytes) remember_free(p + bytes, have - bytes);
      ++stats_.in_place;
    } else {
      p = fresh(bytes);
    }
    live_[p] = bytes;
    stats_.live_bytes += static_cast<std::int64_t>(bytes);
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
    stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.live_bytes + stats_.free_bytes);
    return p;
  }

  // No free range is large enough: fresh pages. Before they are mapped, free ranges (the
  // smallest first: the fragments that caused the miss) are returned to the system until what
  // the pool holds, with them, stays within 1/kPoolSlackDivisor over the most its tensors have held.
  char* fresh(std::size_t bytes) const {
    const auto live_after = stats_.live_bytes + static_cast<std::int64_t>(bytes);
    const auto peak = std::max(stats_.peak_live_bytes, live_after), limit = peak + peak / kPoolSlackDivisor;
    while (!free_by_size_.empty() && live_after + stats_.free_bytes > limit) {
      const auto smallest = free_by_size_.begin();
      char* p = smallest->second;
      const std::size_t n = smallest->first;
      forget_free(smallest);
      munmap(p, n);
      stats_.released_bytes += static_cast<std::int64_t>(n);
    }
    if (limit_ > 0) within_limit(bytes);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      note_refused_allocation({static_cast<std::int64_t>(bytes), resident_bytes(), 0});
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: could not map ", bytes, " bytes for a tensor (",
                       stats_.live_bytes, " bytes in live tensors)");
    }
    stats_.fresh_bytes += static_cast<std::int64_t>(bytes);
    return static_cast<char*>(p);
  }

  // memory.limit: fresh pages past it are refused, once every free range has gone back (they
  // count in the resident memory the limit is on).
  void within_limit(std::size_t bytes) const {
    const auto asked = static_cast<std::int64_t>(bytes);
    std::int64_t resident = resident_bytes();
    if (resident + asked <= limit_) return;
    release_all_free();
    resident = resident_bytes();
    if (resident + asked <= limit_) return;
    note_refused_allocation({asked, resident, limit_});
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory limit (memory.limit) of ", limit_, " bytes: ", resident,
                     " bytes resident, a tensor asked for ", asked, " more");
  }

  void put(void* ptr) const {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) {  // a small block, from raw_allocate
      lock.unlock();
      c10::free_cpu(ptr);
      return;
    }
    char* p = static_cast<char*>(ptr);
    std::size_t bytes = it->second;
    live_.erase(it);
    stats_.live_bytes -= static_cast<std::int64_t>(bytes);
    // Joined with free neighbours, so that a later, larger request finds them as one range.
    if (auto next = free_by_addr_.find(p + bytes); next != free_by_addr_.end()) {
      bytes += next->second;
      forget_free(next->first, next->second);
    }
    if (auto after = free_by_addr_.lower_bound(p); after != free_by_addr_.begin()) {
      const auto before = std::prev(after);
      if (before->first + before->second == p) {
        p = before->first;
        bytes += before->second;
        forget_free(before->first, before->second);
      }
    }
    remember_free(p, bytes);
  }

  void release_all_free() const {
    for (const auto& [p, n] : free_by_addr_) {
      munmap(p, n);
      stats_.released_bytes += static_cast<std::int64_t>(n);
    }
    free_by_addr_.clear();
    free_by_size_.clear();
    stats_.free_bytes = 0;
  }

  void remember_free(char* p, std::size_t bytes) const {
    free_by_addr_.emplace(p, bytes);
    free_by_size_.emplace(bytes, p);
    stats_.free_bytes += static_cast<std::int64_t>(bytes);
  }
  void forget_free(std::multimap<std::size_t, char*>::iterator by_size) const {
    free_by_addr_.erase(by_size->second);
    stats_.free_bytes -= static_cast<std::int64_t>(by_size->first);
    free_by_size_.erase(by_size);
  }
  void forget_free(char* p, std::size_t bytes) const {
    auto range = free_by_size_.equal_range(bytes);
    for (auto e = range.first; e != range.second; ++e) {
      if (e->second == p) return forget_free(e);
    }
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::size_t> live_;
  mutable std::map<char*, std::size_t> free_by_addr_;
  mutable std::multimap<std::size_t, char*> free_by_size_;
  mutable TensorPoolStats stats_;
  mutable std::int64_t limit_ = 0;  // memory.limit in bytes of resident memory; 0: none
};

}  // namespace

void use_tensor_pool() {
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPooledBytes));  // fixed: glibc no longer raises it to keep large blocks
  c10::SetCPUAllocator(&TensorPool::instance(), /*priority=*/10);
}

TensorPoolScope::TensorPoolScope() : before_(c10::GetCPUAllocator()) { use_tensor_pool(); }

TensorPoolScope::~TensorPoolScope() { c10::SetCPUAllocator(static_cast<c10::Allocator*>(before_), /*priority=*/10); }

void use_exact_allocator() {
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kExactMappedBytes));  // a fixed threshold also stops glibc from raising it
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kExactMappedBytes));
}

void use_allocator(bool exact) {
  if (exact) {
    use_exact_allocator();
  } else {
    use_tensor_pool();
  }
}

void release_free_memory() {
  TensorPool::instance().trim();
  malloc_trim(0);
}

void set_pool_limit(std::int64_t bytes) { TensorPool::instance().set_limit(bytes); }

TensorPoolStats tensor_pool_stats() { return TensorPool::instance().stats(); }

}  // namespace ctune::ops
