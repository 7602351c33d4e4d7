// Which of cpu_kernels.cpp's tables this CPU runs (cpu_kernels.h): the widest x86-64 level it
// supports, asked once; elsewhere the baseline.
#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {
const CpuKernels* g_override = nullptr;
bool g_fused = true;
}  // namespace

int elem_index(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return kF32;
    case c10::kBFloat16: return kBF16;
    case c10::kHalf: return kF16;
    case c10::kDouble: return kF64;
    default: return -1;
  }
}

bool fused_ops_enabled() { return g_fused; }
CompositeOpsOnly::CompositeOpsOnly() : previous_(g_fused) { g_fused = false; }
CompositeOpsOnly::~CompositeOpsOnly() { g_fused = previous_; }

std::vector<const CpuKernels*> cpu_kernel_tables() {
  std::vector<const CpuKernels*> tables;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) tables.push_back(&cpu_kernels_x86_64_v4());
  if (__builtin_cpu_supports("x86-64-v3")) tables.push_back(&cpu_kernels_x86_64_v3());
#endif
  tables.push_back(&cpu_kernels_baseline());
  return tables;
}

const CpuKernels& cpu_kernels() {
  static const CpuKernels* widest = cpu_kernel_tables().front();
  return g_override ? *g_override : *widest;
}

CpuKernelsOverride::CpuKernelsOverride(const CpuKernels& table) : previous_(g_override) { g_override = &table; }
CpuKernelsOverride::~CpuKernelsOverride() { g_override = previous_; }

}  // namespace ctune::ops
