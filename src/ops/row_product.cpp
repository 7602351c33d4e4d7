#include "ops/row_product.h"

#include <ATen/Parallel.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {

// A chunk is about 64 KB of weight: a few microseconds of one core's reading, so a chunk the
// caller recomputes costs little, and coarse enough that the shared counter is not the cost (the
// SmolLM head's 113 MB is 1,700 chunks).
constexpr std::int64_t kChunkBytes = 64 << 10;
constexpr std::int64_t kMaxChunkRows = 4096;  // bounds a worker's buffer (16 KB)
// How long the caller waits for a chunk a worker holds before computing it itself: twice what
// one of its own chunks took, and at least this (the clock's own cost, the first chunk's faults).
constexpr std::int64_t kMinHoldNanos = 2000;
// A worker waits this long for the next product before it sleeps: a decode step's products
// follow each other within microseconds; between generations it sleeps.
constexpr std::int64_t kIdleSpinNanos = 100000;
// Workers only run the kernel: a small stack keeps each one's address space small (`ulimit -v`).
constexpr std::size_t kWorkerStackBytes = 256 << 10;
constexpr std::uint64_t kStop = ~std::uint64_t{0};
constexpr int kMaxWorkers = 254;  // a ticket names its slot in 8 bits

enum : std::uint8_t { kOpen = 0, kPublishing = 1, kDone = 2, kTakenBack = 3 };

std::atomic<std::int64_t> g_stall_micros{0};
std::atomic<std::int64_t> g_taken_back{0};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One product on offer. The caller writes a slot only while no worker reads it (readers == 0);
// a worker that still holds an old product's ticket (it was descheduled) keeps that slot, and
// its tensors alive, until it has left it.
struct Slot {
  std::atomic<std::uint64_t> generation{0};  // 0 while the caller writes the slot
  std::atomic<int> readers{0};
  at::Tensor weight, input;
  DotRowsFn fn = nullptr;
  DotRowsArgs args{};
  float* out = nullptr;
  std::int64_t rows = 0, chunk_rows = 1, chunks = 0;
  // The chunks not yet taken, [front, back) packed as back << 32 | front: the caller takes them
  // from the front, the workers from the back, so each reads its rows as one long run and they
  // meet where the weight is done.
  std::atomic<std::uint64_t> open_chunks{0};
  std::unique_ptr<std::atomic<std::uint8_t>[]> state;
  std::int64_t capacity = 0;

  std::int64_t begin(std::int64_t i) const { return i * chunk_rows; }
  // The next chunk from the front (the caller) or the back (a worker); -1 when none is left.
  std::int64_t take_chunk(bool from_front) {
    std::uint64_t ends = open_chunks.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t front = ends & 0xffffffffu, back = ends >> 32;
      if (front >= back) return -1;
      const std::uint64_t taken = from_front ? front : back - 1;
      const std::uint64_t rest = from_front ? (back << 32 | (front + 1)) : ((back - 1) << 32 | front);
      if (open_chunks.compare_exchange_weak(ends, rest, std::memory_order_relaxed)) return static_cast<std::int64_t>(taken);
    }
  }
  std::int64_t end(std::int64_t i) const { return std::min(rows, (i + 1) * chunk_rows); }
};

class Pool {
 public:
  explicit Pool(int workers);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  int requested() const { return requested_; }
  void run(const at::Tensor& w, const at::Tensor& x, DotRowsFn fn, float* out, std::int64_t rows);

 private:
  static void* thread_main(void* self);
  Slot& claim_slot(int& index);
  std::uint64_t wait_for(std::uint64_t seen);
  void work(std::vector<float>& scratch);
  void take(Slot& s, std::vector<float>& scratch);
  void collect(Slot& s, std::int64_t chunk_ns);

  int requested_ = 0;
  std::vector<pthread_t> threads_;
  std::vector<std::vector<float>> scratch_;  // one per worker, allocated here (no arena per worker)
  std::unique_ptr<Slot[]> slots_;
  int slot_count_ = 0, last_slot_ = 0;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> ticket_{0};  // generation << 8 | slot of the product on offer
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

struct WorkerStart {
  Pool* pool;
  std::vector<float>* scratch;
};

Pool::Pool(int workers) : requested_(workers), scratch_(static_cast<std::size_t>(workers), std::vector<float>(kMaxChunkRows)) {
  // Each worker pins at most one slot, so the caller always finds a free one.
  slot_count_ = std::min(workers, kMaxWorkers) + 2;
  slots_ = std::make_unique<Slot[]>(static_cast<std::size_t>(slot_count_));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kWorkerStackBytes);
  for (int i = 0; i < std::min(workers, kMaxWorkers); ++i) {
    pthread_t thread;
    auto* start = new WorkerStart{this, &scratch_[static_cast<std::size_t>(i)]};
    if (pthread_create(&thread, &attr, &Pool::thread_main, start) != 0) {
      delete start;
      break;  // fewer workers: the caller computes the rest
    }
    threads_.push_back(thread);
  }
  pthread_attr_destroy(&attr);
}

Pool::~Pool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  for (auto thread : threads_) pthread_join(thread, nullptr);
}

void* Pool::thread_main(void* arg) {
  std::unique_ptr<WorkerStart> start(static_cast<WorkerStart*>(arg));
  start->pool->work(*start->scratch);
  return nullptr;
}

// The next ticket after `seen`: spinning briefly, then asleep until the caller offers one.
std::uint64_t Pool::wait_for(std::uint64_t seen) {
  const std::int64_t until = now_ns() + kIdleSpinNanos;
  for (int spins = 1;; ++spins) {
    if (stop_.load(std::memory_order_relaxed)) return kStop;
    const auto ticket = ticket_.load(std::memory_order_acquire);
    if (ticket != seen) return ticket;
    if (spins % 64 == 0 && now_ns() > until) break;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);  // before the predicate reads the ticket: the caller's store and load pair with these
  wake_.wait(lock, [&] { return stop_.load() || ticket_.load() != seen; });
  sleepers_.fetch_sub(1);
  return stop_.load() ? kStop : ticket_.load();
}

void Pool::work(std::vector<float>& scratch) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::uint64_t ticket = wait_for(seen);
    if (ticket == kStop) return;
    seen = ticket;
    Slot& s = slots_[ticket & 0xff];
    s.readers.fetch_add(1);
    if (s.generation.load() == (ticket >> 8)) take(s, scratch);
    s.readers.fetch_sub(1);
  }
}

// A worker's chunks: each computed into its own buffer, published unless the caller took it back.
void Pool::take(Slot& s, std::vector<float>& scratch) {
  for (;;) {
    const std::int64_t i = s.take_chunk(false);
    if (i < 0) return;
    const std::int64_t begin = s.begin(i), end = s.end(i);
    const std::int64_t stall = g_stall_micros.load(std::memory_order_relaxed);
    if (stall > 0) {
      const std::int64_t half = begin + (end - begin) / 2;
      s.fn(s.args, begin, half, scratch.data());
      std::this_thread::sleep_for(std::chrono::microseconds(stall));
      s.fn(s.args, half, end, scratch.data() + (half - begin));
    } else {
      s.fn(s.args, begin, end, scratch.data());
    }
    std::uint8_t open = kOpen;
    if (s.state[i].compare_exchange_strong(open, kPublishing, std::memory_order_acq_rel)) {
      std::memcpy(s.out + begin, scratch.data(), static_cast<std::size_t>(end - begin) * sizeof(float));
      s.state[i].store(kDone, std::memory_order_release);
    }
  }
}

// A slot no worker reads: its generation is cleared before readers is checked again, so a worker
// that arrives later sees a generation that is not its ticket's and leaves.
Slot& Pool::claim_slot(int& index) {
  for (int tries = 1;; ++tries) {
    index = (last_slot_ + tries) % slot_count_;
    Slot& s = slots_[index];
    if (s.readers.load() != 0) continue;
    s.generation.store(0);
    if (s.readers.load() != 0) continue;
    last_slot_ = index;
    return s;
  }
}

// The caller, out of chunks: every chunk a worker holds, waited for while a chunk's time passes,
// then computed here.
void Pool::collect(Slot& s, std::int64_t chunk_ns) {
  const std::int64_t hold = std::max(kMinHoldNanos, 2 * chunk_ns);
  for (std::int64_t i = 0; i < s.chunks; ++i) {
    std::uint8_t state = s.state[i].load(std::memory_order_acquire);
    if (state == kDone || state == kTakenBack) continue;
    const std::int64_t deadline = now_ns() + hold;
    while (state == kOpen && now_ns() < deadline) {
      cpu_relax();
      state = s.state[i].load(std::memory_order_acquire);
    }
    if (state == kOpen && s.state[i].compare_exchange_strong(state, kTakenBack, std::memory_order_acq_rel)) {
      s.fn(s.args, s.begin(i), s.end(i), s.out + s.begin(i));
      g_taken_back.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    while (state != kDone) {  // kPublishing: the worker copies one chunk
      cpu_relax();
      state = s.state[i].load(std::memory_order_acquire);
    }
  }
}

void Pool::run(const at::Tensor& w, const at::Tensor& x, DotRowsFn fn, float* out, std::int64_t rows) {
  int index = 0;
  Slot& s = claim_slot(index);
  const std::int64_t row_bytes = w.size(1) * static_cast<std::int64_t>(w.element_size());
  s.weight = w, s.input = x, s.fn = fn, s.out = out, s.rows = rows;
  s.args = DotRowsArgs{w.data_ptr(), w.size(1), x.data_ptr<float>()};
  s.chunk_rows = std::clamp<std::int64_t>(kChunkBytes / std::max<std::int64_t>(row_bytes, 1), 1, kMaxChunkRows);
  s.chunks = (rows + s.chunk_rows - 1) / s.chunk_rows;
  if (s.capacity < s.chunks) {
    s.state = std::make_unique<std::atomic<std::uint8_t>[]>(static_cast<std::size_t>(s.chunks));
    s.capacity = s.chunks;
  }
  for (std::int64_t i = 0; i < s.chunks; ++i) s.state[i].store(kOpen, std::memory_order_relaxed);
  s.open_chunks.store(static_cast<std::uint64_t>(s.chunks) << 32, std::memory_order_relaxed);
  const std::uint64_t generation = ++generation_;
  s.generation.store(generation);
  ticket_.store(generation << 8 | static_cast<std::uint64_t>(index));
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  std::int64_t chunk_ns = 0;
  for (;;) {
    const std::int64_t i = s.take_chunk(true);
    if (i < 0) break;
    const std::int64_t start = chunk_ns == 0 ? now_ns() : 0;
    fn(s.args, s.begin(i), s.end(i), out + s.begin(i));
    if (chunk_ns == 0) chunk_ns = std::max<std::int64_t>(now_ns() - start, 1);
    s.state[i].store(kDone, std::memory_order_relaxed);
  }
  collect(s, chunk_ns);
}

// The pool for this many threads (the caller is one), made on first use and again when the
// intra-op thread count changes. Never destroyed at exit: its slots hold tensors, and LibTorch's
// own statics may be gone by then. A second thread calling while one runs computes its rows alone.
std::mutex g_pool_mutex;
Pool* g_pool = nullptr;

DotRowsFn kernel_for(at::ScalarType dtype) {
  return dtype == at::kFloat ? cpu_kernels().dot_rows[kF32] : cpu_kernels().dot_rows[kBF16];
}

}  // namespace

bool row_product_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
  return !needs_grad && x.is_cpu() && w.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
         x.numel() == x.size(-1) && w.dim() == 2 && w.size(1) == x.numel() && w.stride(1) == 1 &&
         w.stride(0) == w.size(1) && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16) &&
         (!bias.defined() || (bias.is_cpu() && bias.numel() == w.size(0))) && kernel_for(w.scalar_type()) != nullptr;
}

at::Tensor row_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const std::int64_t rows = w.size(0);
  auto y = at::empty({rows}, x.options().dtype(at::kFloat));
  const DotRowsFn fn = kernel_for(w.scalar_type());
  const int threads = at::get_num_threads();
  std::unique_lock<std::mutex> lock(g_pool_mutex, std::try_to_lock);
  if (threads <= 1 || at::in_parallel_region() || !lock.owns_lock() || rows < 2) {
    fn(DotRowsArgs{w.data_ptr(), w.size(1), x.data_ptr<float>()}, 0, rows, y.data_ptr<float>());
  } else {
    if (g_pool == nullptr || g_pool->requested() != threads - 1) {
      delete g_pool;
      g_pool = new Pool(threads - 1);
    }
    g_pool->run(w, x, fn, y.data_ptr<float>(), rows);
  }
  if (bias.defined()) y.add_(bias.to(at::kFloat));
  return y;
}

RowProductStall::RowProductStall(std::int64_t micros) { g_stall_micros.store(micros); }
RowProductStall::~RowProductStall() { g_stall_micros.store(0); }
std::int64_t row_product_chunks_taken_back() { return g_taken_back.load(); }

}  // namespace ctune::ops
