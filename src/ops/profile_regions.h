// The names of the regions a training step is made of, for the step profiler
// (train/observe/profiler.h, logging.profile). Code marks a region with
//   RECORD_USER_SCOPE(ops::region::kNorm);
// (ATen's record_function.h): with no profiler listening the mark costs one flag test. A
// custom autograd function's backward needs no mark: the profiler knows its node by the
// function's name. One home for the names; the profiler's table maps each to its category.
#pragma once

namespace ctune::ops::region {

inline constexpr char kAttention[] = "ctune::attention";
inline constexpr char kNorm[] = "ctune::norm";
inline constexpr char kRope[] = "ctune::rope";
inline constexpr char kActivation[] = "ctune::activation";  // SwiGLU / GeGLU
inline constexpr char kLoss[] = "ctune::loss";
inline constexpr char kOptimizer[] = "ctune::optimizer";  // unscale, norm, clip, update, zero
inline constexpr char kRecompute[] = "ctune::recompute";  // a checkpointed block's second forward
inline constexpr char kDequantize[] = "ctune::dequantize";
inline constexpr char kCollective[] = "ctune::collective";
inline constexpr char kData[] = "ctune::data";

// Not a region but one operator: a GEMM ctune calls in oneDNN itself (ops/cpu_gemm.h
// weight_grad_fp32), recorded with its two operands, [m, k] and [k, n], so the profiler times and
// counts it as it does ATen's mm.
inline constexpr char kGemm[] = "ctune::gemm";

}  // namespace ctune::ops::region
