#include "ops/cpu_features.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ctune::ops::cpu_features {

bool native_bf16_gemm() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#elif defined(__aarch64__) && defined(__linux__)
  constexpr unsigned long kHwcap2Bf16 = 1UL << 14;  // HWCAP2_BF16 (asm/hwcap.h)
  return (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;
#else
  return true;
#endif
}

bool int32_int8_dot_products() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
#else
  return true;
#endif
}

}  // namespace ctune::ops::cpu_features
