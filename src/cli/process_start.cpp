// What the ctune process arranges before any shared library starts. An entry in the executable's
// .preinit_array runs after the loader has mapped every library and before any library's
// constructor: the moment at which a start that cannot succeed can still be refused in words
// (docs/planning.md, "Running out of memory"), and the last at which settings that libraries
// read once, in their constructors, can still be given (docs/performance.md, "Beside a
// neighbour").
//
// Only system calls and libc here: the C++ runtime's own objects are not constructed yet.
#include <fcntl.h>
#include <sys/mman.h>
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

// LibTorch's intra-op threads are libgomp's (Debian's OpenBLAS is its OpenMP build and oneDNN
// runs on the same threads), and a libgomp thread that finds no work spins about 300,000
// iterations before it sleeps. Beside another busy process on the same cores that spin takes the
// time the thread it waits for needs: a LoRA step kept 0.31-0.44x its quiet speed beside one busy
// loop and 0.35x beside a second ctune. Sleeping at once (OMP_WAIT_POLICY=PASSIVE) held 0.54x but
// cost batch-1 decode 30% (a wake-up at every parallel region); a spin of 10,000 kept both. A
// user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
constexpr const char* kSpinSetting = "GOMP_SPINCOUNT=10000";

// libgomp reads its settings once, in its constructor, and a setenv here does not reach it: libc's
// initialisation, which runs after this array, resets `environ` to the kernel's array. (A
// library whose constructor ran between libc's and libgomp's would need to come before LibTorch's
// subtree in the loader's depth-first order, which a link line cannot arrange.) So a command that
// computes starts itself again with the setting added, before any constructor has run: the
// loader's relocations done twice (about 0.3 s on the measured virtual machine), the pid kept.
// The quick commands (validate, info, estimate, ...) run as they are. What ctune starts (a reward
// program, the launcher's ranks) inherits the setting and starts once.
bool starts_with(const char* text, const char* prefix) { return std::strncmp(text, prefix, std::strlen(prefix)) == 0; }

// The subcommand: the first word that is neither a global option nor its value.
const char* subcommand(char** argv) {
  for (int i = 1; argv[i] != nullptr; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 || std::strcmp(argv[i], "--log-level") == 0) {
      if (argv[++i] == nullptr) return nullptr;
      continue;
    }
    if (argv[i][0] != '-') return argv[i];
  }
  return nullptr;
}

bool computes(const char* command) {
  for (const char* name : {"train", "generate", "eval", "score", "plan"})
    if (command != nullptr && std::strcmp(command, name) == 0) return true;
  return false;
}

void wait_without_spinning(char** argv, char** envp) {
  if (argv == nullptr || envp == nullptr || !computes(subcommand(argv))) return;
  std::size_t n = 0;
  for (; envp[n] != nullptr; ++n)
    if (starts_with(envp[n], "OMP_WAIT_POLICY=") || starts_with(envp[n], "GOMP_SPINCOUNT=")) return;
  const std::size_t bytes = (n + 2) * sizeof(char*);
  void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return;
  char** env = static_cast<char**>(block);
  for (std::size_t i = 0; i < n; ++i) env[i] = envp[i];
  env[n] = const_cast<char*>(kSpinSetting);
  env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, env);  // returns only when it failed (no /proc): run as is
  ::munmap(block, bytes);
}

void before_libraries(int, char** argv, char** envp) {
  refuse_a_start_that_cannot_fit();
  wait_without_spinning(argv, envp);
}

}  // namespace

// Run by the dynamic loader before any library's constructor (ELF DT_PREINIT_ARRAY; honoured in
// executables only, which is where this file is linked).
__attribute__((section(".preinit_array"), used)) void (*const ctune_before_libraries)(int, char**, char**) = before_libraries;
