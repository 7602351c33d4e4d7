// What this machine does per second, measured once and cached (docs/planning.md, "The step-time
// model"): the GEMM rate of each compute dtype at a large and a small row count, the memory
// bandwidth of a large copy, the rate at which int8 and nf4 weights dequantise, and what the
// run's own collectives cost between two ranks of this machine (per call and per byte).
// The planner ranks plans with these; none is a constant fitted elsewhere.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <string>

#include "distributed/collective_rates.h"

namespace ctune::train {

struct MachineRates {
  std::string key;  // what was measured: CPU model, threads, device (the cache's key)
  double gemm_fp32 = 0, gemm_bf16 = 0;              // FLOP/s, [2048, 2048] x [2048, 2048]
  double gemm_fp32_small = 0, gemm_bf16_small = 0;  // FLOP/s, [256, 2048] x [2048, 2048]
  double memory_bandwidth = 0;                      // bytes/s read + written by a 64 MB copy
  double dequant_int8 = 0, dequant_nf4 = 0;         // weights/s dequantised to bf16
  distributed::CollectiveRates collectives;         // all-gather, reduce-scatter, all-reduce; zero: not measured
  double op_seconds = 0;  // one small operator with autograd, forward and backward (dispatch, the graph, the engine)

  // The GEMM rate of `dtype` for `m` rows (interpolated in log m between the two measured
  // shapes; fp16 on a CPU runs in fp32).
  double gemm(at::ScalarType dtype, std::int64_t m) const;
};

// The rates of `device` with `threads` intra-op threads: read from the cache
// ($XDG_CACHE_HOME/ctune or ~/.cache/ctune, machine-rates.json, keyed by MachineRates::key), or
// measured (a few seconds) and cached. `remeasure` ignores the cache.
MachineRates machine_rates(at::Device device, int threads, bool remeasure = false);

}  // namespace ctune::train
