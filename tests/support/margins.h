// Tolerances with their margins. Every numeric comparison of the suite states the figure it
// measured and the tolerance that figure must respect, through within() or beyond(); how each
// tolerance is derived is in docs/testing.md and in a comment beside the call.
//
// Each call prints one line ("[margin] Suite.Test: what: measured M, tolerance T, margin M/T")
// and, when CTUNE_MARGINS_DIR is set (scripts/test.sh sets it), appends the same record to a
// file of this process there, so that the script can end with the tightest margins of the run.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace ctune::test {

// Unit roundoff (half an ulp of 1, the largest relative error of one rounding to nearest).
inline constexpr double kUnitRoundoffFp32 = 5.9604644775390625e-08;  // 2^-24
inline constexpr double kUnitRoundoffFp16 = 4.8828125e-04;           // 2^-11
inline constexpr double kUnitRoundoffBf16 = 3.90625e-03;             // 2^-8

// How many times the float32 noise of a computation (tests/fp32_noise.py: the RMS distance of
// float32 evaluations from float64) ctune's fp32 result may differ from the float64 reference.
// ctune performs the same operations in float32 in another order, so its distance is one more
// sample of that noise: measured 0.3x to 1.3x the RMS (median 0.6x) over the reference
// gradients. 8x leaves room for an unlucky sample, and stays 100x to 1000x below what a wrong
// formula moves.
inline constexpr double kNoiseFactor = 8.0;

// The tolerance for an fp32 result whose reference value has float32 noise `noise` (relative or
// absolute, as the noise was measured): kNoiseFactor times it, never below one rounding.
inline double noise_tolerance(double noise, double floor = kUnitRoundoffFp32) {
  return kNoiseFactor * (noise > floor ? noise : floor);
}

// Low precision (bf16/fp16 compute against fp32 or float64), docs/testing.md: a forward whose
// M matmuls each round their operands and result at unit roundoff u moves a logit, and so a
// token's NLL, by about u sqrt(M) times the logits' spread (their RMS about each row's mean):
// independent rounding errors add in quadrature. Gradients pass through about 3M roundings
// (forward, and two products per matmul in backward), so a gradient tensor's relative error is
// about u sqrt(3M). Tests accept 3 to 4 times these estimates.
inline double low_precision_nll_estimate(double u, double matmuls, double logit_spread) {
  return u * std::sqrt(matmuls) * logit_spread;
}
inline double low_precision_grad_estimate(double u, double matmuls) { return u * std::sqrt(3 * matmuls); }
// Matmuls a position passes through in a Llama-family forward: 7 projections and 2 attention
// products per layer and the head, plus 2 per LoRA-wrapped projection.
inline double llama_matmuls(std::int64_t layers, std::int64_t lora_projections_per_layer = 0) {
  return static_cast<double>(layers) * (9.0 + 2.0 * static_cast<double>(lora_projections_per_layer)) + 1.0;
}

// Passes when measured <= tolerance (a NaN fails). Margin: measured / tolerance.
::testing::AssertionResult within(const std::string& what, double measured, double tolerance);

// Passes when measured >= floor: negative controls and lower bounds. Margin: floor / measured.
::testing::AssertionResult beyond(const std::string& what, double measured, double floor);

}  // namespace ctune::test
