// What the ctune process arranges before any shared library starts. An entry in the executable's
// .preinit_array runs after the loader has mapped every library and before any library's
// constructor: the one moment at which settings that libraries read once, in their
// constructors, can still be given, and at which a start that cannot succeed can still be
// refused in words (docs/performance.md, "Beside a neighbour"; docs/planning.md, "Running out of
// memory").
//
// Only system calls and libc here: the C++ runtime's own objects are not constructed yet.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/threads.h"

namespace {

// What the libraries' constructors reserve besides OpenBLAS's buffers (LibTorch's, libgomp's,
// oneDNN's: measured about 30 MB), with room to spare.
constexpr std::int64_t kOtherConstructors = std::int64_t{64} << 20;

// How long an idle libgomp thread spins before it sleeps, in its iterations (libgomp's default:
// 300,000; OMP_WAIT_POLICY=PASSIVE: 0). Chosen by measurement (docs/performance.md, "Beside a
// neighbour").
constexpr const char* kSpinCount = "10000";

// VmSize of this process in bytes, read without the C++ runtime; 0 when unreadable.
std::int64_t mapped_now() {
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* at = std::strstr(buf, "VmSize:");
  return at ? std::strtoll(at + 7, nullptr, 10) * 1024 : 0;
}

// Under ulimit -v, a start the libraries' constructors cannot complete is refused here, in one
// line: OpenBLAS's constructor reserves its buffers (core/threads.h) and retries a failed mmap
// forever (ctune hung before main under ulimit -v 800 MB).
void refuse_a_start_that_cannot_fit() {
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return;
  const auto limit = static_cast<std::int64_t>(as.rlim_cur);
  const std::int64_t threads = ctune::blas_threads_at_start();
  const std::int64_t mapped = mapped_now(), need = threads * ctune::kBlasBufferBytes + kOtherConstructors;
  if (mapped + need <= limit) return;
  char line[512];
  const int n = std::snprintf(line, sizeof line,
                              "ctune: out of memory: starting needs about %lld MB more address space (OpenBLAS reserves %lld MB "
                              "per core for its %lld cores: OPENBLAS_NUM_THREADS lowers it), past the %lld MB left of the %lld MB "
                              "of its address-space limit (ulimit -v; %lld MB mapped already)\n",
                              static_cast<long long>(need / 1000000), static_cast<long long>(ctune::kBlasBufferBytes / 1000000),
                              static_cast<long long>(threads), static_cast<long long>((limit - mapped) / 1000000),
                              static_cast<long long>(limit / 1000000), static_cast<long long>(mapped / 1000000));
  if (n > 0) (void)!::write(STDERR_FILENO, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
  ::_exit(1);
}

// LibTorch's intra-op threads are libgomp's (OpenBLAS, built for OpenMP, and oneDNN run on them
// too), and a libgomp thread that finds no work spins for about 300,000 iterations before it
// sleeps. Beside another busy process on the same cores that spinning takes the time the thread
// it waits for needs: a LoRA step kept 0.31-0.44x its quiet speed beside one busy loop and 0.35x
// beside a second ctune. Sleeping at once (OMP_WAIT_POLICY=PASSIVE) held 0.54x but cost batch-1
// decode 30% (a wake-up per parallel region); a short spin kept both (docs/performance.md,
// "Beside a neighbour"). libgomp reads its settings once, in its constructor, so they are given
// here; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept. Child processes (a reward
// program, the launcher's ranks) inherit it.
void wait_without_spinning() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  ::setenv("GOMP_SPINCOUNT", kSpinCount, 0);
}

void before_libraries(int, char**, char**) {
  refuse_a_start_that_cannot_fit();
  wait_without_spinning();
}

}  // namespace

// Run by the dynamic loader before any library's constructor (ELF DT_PREINIT_ARRAY; honoured in
// executables only, which is where this file is linked).
__attribute__((section(".preinit_array"), used)) void (*const ctune_before_libraries)(int, char**, char**) = before_libraries;
