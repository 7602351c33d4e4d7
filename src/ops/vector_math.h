// Scalar math written so that the compiler vectorizes it: the element-wise CPU kernels
// (ops/cpu_kernels.cpp) are plain loops over these, marked `#pragma omp simd` and compiled once
// per x86-64 level (AVX-512, AVX2 + FMA, the baseline) with -fopenmp-simd (the pragmas, no
// OpenMP runtime) and -fno-trapping-math (both sides of a select may be computed; no result
// changes); ops/cpu_kernels.h picks the widest the CPU has at run time.
//
// Accuracy (docs/performance.md#kernels): exp_f32 is Cephes' expf (Cody-Waite reduction, degree
// 6 polynomial), relative error below 2 ulp over [-87.3, 88.4] and 0 below; tanh_f32 is
// Cephes' tanhf (an odd polynomial below 0.625, exp above), absolute error below 2 ulp of 1;
// sigmoid_f32 inherits exp's. bf16 rounds to nearest even, as c10::BFloat16 does. In double
// the functions are the libm ones (the finite-difference tests run the kernels in float64).
#pragma once

#include <cmath>
#include <cstdint>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#define CTUNE_INLINE inline __attribute__((always_inline))

namespace ctune::ops::vec {

// ---- element types: load as the accumulation type, store rounded ----------------------------

template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

CTUNE_INLINE float load(const float* p, std::int64_t i) { return p[i]; }
CTUNE_INLINE double load(const double* p, std::int64_t i) { return p[i]; }
CTUNE_INLINE float load(const c10::BFloat16* p, std::int64_t i) {
  return __builtin_bit_cast(float, static_cast<std::uint32_t>(p[i].x) << 16);
}
CTUNE_INLINE float load(const c10::Half* p, std::int64_t i) { return static_cast<float>(p[i]); }

CTUNE_INLINE void store(float* p, std::int64_t i, float v) { p[i] = v; }
CTUNE_INLINE void store(double* p, std::int64_t i, double v) { p[i] = v; }
CTUNE_INLINE void store(c10::BFloat16* p, std::int64_t i, float v) {
  const auto u = __builtin_bit_cast(std::uint32_t, v);
  // Round to nearest even; a NaN stays a (quiet) NaN.
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  p[i].x = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((u >> 16) | 0x40u) : static_cast<std::uint16_t>(rounded);
}
CTUNE_INLINE void store(c10::Half* p, std::int64_t i, float v) { p[i] = c10::Half(v); }

// The value a store to T would leave, as the accumulation type (a rounding to T's precision).
template <typename T>
CTUNE_INLINE typename Acc<T>::type round_to(typename Acc<T>::type v) {
  T t[1];
  store(t, 0, v);
  return load(t, 0);
}

// ---- functions ----------------------------------------------------------------------------

CTUNE_INLINE float exp_f32(float x) {
  const bool underflow = x < -87.33654475f;  // e^x below the smallest normal float
  x = x < -87.33654475f ? -87.33654475f : (x > 88.37626266f ? 88.37626266f : x);
  // k = round(x / ln 2) by the 1.5 · 2^23 trick: floor() would keep the loop scalar.
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scaled = p * __builtin_bit_cast(float, static_cast<std::uint32_t>(static_cast<std::int32_t>(k) + 127) << 23);
  return underflow ? 0.0f : scaled;
}

CTUNE_INLINE float tanh_f32(float x) {
  const float a = x < 0 ? -x : x;
  const float z = x * x;
  float small = -5.70498872745e-3f;
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * x + x;
  float large = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
  large = x < 0 ? -large : large;
  return a < 0.625f ? small : large;
}

CTUNE_INLINE float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

CTUNE_INLINE float exp_of(float x) { return exp_f32(x); }
CTUNE_INLINE double exp_of(double x) { return std::exp(x); }
CTUNE_INLINE float tanh_of(float x) { return tanh_f32(x); }
CTUNE_INLINE double tanh_of(double x) { return std::tanh(x); }
CTUNE_INLINE float sigmoid_of(float x) { return sigmoid_f32(x); }
CTUNE_INLINE double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace ctune::ops::vec
