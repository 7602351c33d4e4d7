#!/usr/bin/env bash
# Builds ctune and runs every test (CTest + GoogleTest), from a fresh clone, then prints the ten
# tightest tolerance margins of the run (scripts/margins.sh).
# Then, unless CTUNE_SKIP_ASAN=1, rebuilds the torch-free readers (safetensors, checkpoint
# index, config.json, tokenizers, datasets, chat templates, recipes) with AddressSanitizer + UBSan
# and runs their tests.
# Then, unless CTUNE_SKIP_THIRD_PARTY=1, builds the torch-free tests with every dependency taken
# from a vendored prefix (scripts/vendor_deps.sh, -DCTUNE_THIRD_PARTY=ON: the GPU machine's
# build, docs/gpu.md), runs them, and checks that their libraries resolve inside the prefix.
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
  echo "== AddressSanitizer + UBSan: format, tokenizer and data readers, the template engine, recipes"
  CTUNE_TARGETS="test_formats test_tokenizer test_data test_template test_template_corpus test_recipe_parse" bash scripts/build.sh build-asan -DCTUNE_SANITIZE=ON \
    -DCTUNE_TOKENIZER_NPM_CACHE="$PWD/build/test-data/tokenizer/npm"
  ./build-asan/tests/formats/test_formats --gtest_brief=1
  (cd build-asan && ctest --output-on-failure -j "${CTUNE_TEST_JOBS:-2}" -L "tokenizer|data|template|recipe")
fi

if [ "${CTUNE_SKIP_THIRD_PARTY:-0}" != "1" ]; then
  echo "== third_party: dependencies from a vendored prefix (CTUNE_THIRD_PARTY=ON)"
  PREFIX=build-vendored/prefix DEBS=build-vendored/debs bash scripts/vendor_deps.sh
  CTUNE_TARGETS="test_formats test_tokenizer test_tokenizer_torch" bash scripts/build.sh build-vendored/build -DCTUNE_THIRD_PARTY=ON \
    -DCTUNE_THIRD_PARTY_PREFIX="$PWD/build-vendored/prefix" -DCTUNE_TOKENIZER_NPM_CACHE="$PWD/build/test-data/tokenizer/npm"
  prefix="$PWD/build-vendored/prefix"
  # Every dependency CMake found comes from the prefix ...
  for var in nlohmann_json_DIR spdlog_DIR fmt_DIR CLI11_DIR yaml-cpp_DIR GTest_DIR CTUNE_GLOO_INCLUDE \
    pkgcfg_lib_ONIG_onig pkgcfg_lib_UTF8PROC_utf8proc pkgcfg_lib_SENTENCEPIECE_sentencepiece pkgcfg_lib_XXHASH_xxhash; do
    found=$(grep "^$var:" build-vendored/build/CMakeCache.txt | cut -d= -f2-)
    case "$found" in
      "$prefix"/*) ;;
      *) echo "third_party: $var is '$found', not inside $prefix" >&2; exit 1 ;;
    esac
  done
  # ... and the programs load the shared libraries they need from it.
  loaded=$(ldd build-vendored/build/tests/tokenizer/test_tokenizer build-vendored/build/tests/tokenizer/test_tokenizer_torch \
    "$(find build-vendored/build -name 'libctune_spm.so' | head -1)" |
    grep -E "lib(onig|utf8proc|sentencepiece|yaml-cpp|spdlog|fmt|xxhash)\." | awk '{print $1 " " $3}' | sort -u)
  echo "$loaded" | sed 's/^/third_party: /'
  if echo "$loaded" | awk '{print $2}' | grep -v "^$prefix/" | grep -q .; then
    echo "third_party: a library above resolves outside $prefix" >&2
    exit 1
  fi
  for lib in libonig libutf8proc libsentencepiece; do
    echo "$loaded" | grep -q "^$lib\." || { echo "third_party: $lib is not loaded from $prefix" >&2; exit 1; }
  done
  ./build-vendored/build/tests/formats/test_formats --gtest_brief=1
  (cd build-vendored/build && ctest --output-on-failure -j "${CTUNE_TEST_JOBS:-2}" -L tokenizer)
fi
