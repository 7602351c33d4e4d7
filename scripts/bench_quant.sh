#!/usr/bin/env bash
# Builds and runs the quantised-Linear micro-benchmark (bf16 vs int8 dequantize / int8 GEMM / nf4).
# Usage: scripts/bench_quant.sh [THREADS]   (default 2; BUILD_DIR overrides the build folder)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD_DIR" -j2 --target bench_quant
"$BUILD_DIR/tests/quant/bench_quant" "${1:-2}"
