#!/usr/bin/env bash
# Builds ctune and runs every test (CTest + GoogleTest), from a fresh clone, then prints the ten
# tightest tolerance margins of the run (scripts/margins.sh).
# Then, unless CTUNE_SKIP_ASAN=1, rebuilds the torch-free readers (safetensors, checkpoint
# index, config.json, tokenizers, datasets) with AddressSanitizer + UBSan and runs their tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
# Every numeric check records measured vs tolerance here (tests/support/margins.h).
export CTUNE_MARGINS_DIR="$PWD/build/margins"
rm -rf "$CTUNE_MARGINS_DIR"
mkdir -p "$CTUNE_MARGINS_DIR"
status=0
(cd build && ctest --output-on-failure -j "${CTUNE_TEST_JOBS:-2}") || status=$?
bash scripts/margins.sh "$CTUNE_MARGINS_DIR" || echo "margins: could not print the table (status $?)"
[ "$status" -eq 0 ] || exit "$status"
unset CTUNE_MARGINS_DIR

if [ "${CTUNE_SKIP_ASAN:-0}" != "1" ]; then
  echo "== AddressSanitizer + UBSan: format, tokenizer and data readers"
  CTUNE_TARGETS="test_formats test_tokenizer test_data" bash scripts/build.sh build-asan -DCTUNE_SANITIZE=ON \
    -DCTUNE_TOKENIZER_NPM_CACHE="$PWD/build/test-data/tokenizer/npm"
  ./build-asan/tests/formats/test_formats --gtest_brief=1
  (cd build-asan && ctest --output-on-failure -j "${CTUNE_TEST_JOBS:-2}" -L "tokenizer|data")
fi
