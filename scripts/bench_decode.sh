#!/usr/bin/env bash
# The decode benchmark of issues 11 and 69: prefill and decode tokens/s of `ctune generate` (greedy,
# KV cache) on a SmolLM2-135M-shaped model (random weights, recipes/models/smollm2-135m.json),
# side by side, in the same invocation, with two peers on the same weights:
#   eager      the same generation in PyTorch eager with a KV cache (scripts/bench_decode.py,
#              python3-torch: the same LibTorch kernels); fp32 only (ATen's bf16 matmul is a
#              scalar loop on a CPU without AVX-512, docs/performance.md)
#   llama.cpp  node-llama-cpp 3.22.1 (prebuilt CPU backend; scripts/bench_decode_llama.mjs) on the
#              GGUF that `ctune export` writes from the same weights: --type f32 for fp32, bf16 for
#              bf16 (ctune runs --dtype bf16: weights and KV cache in bf16; llama.cpp's KV cache is
#              F32 or BF16 to match); the batch's sequences are parallel sequences of one context,
#              each step one llama_decode of all of them. Not part of the test run; LLAMA=0 skips it.
#   prefill tok/s  prompt tokens over the seconds of the prompts' forward pass and first token
#   decode tok/s   tokens generated after the first over the seconds of the later steps, all
#                  sequences of the batch together (ctune's GenerateStats; the peers count alike)
#   peak MB        resident high-water mark during generation (VmHWM reset after loading, all;
#                  llama.cpp's weights are a mapped file, counted once touched)
#   ratio          ctune over a peer, per repetition (the sides ran back to back), then the median
#   bound          memory-bandwidth bound on decode: a step reads every weight once plus the KV
#                  cache (at the decode steps' mean length) for each sequence, so B sequences make
#                  at most B x bandwidth / (weight bytes + B x cache bytes) tokens/s; the
#                  bandwidth is a read of a 1 GiB buffer with THREADS threads (torch.sum), the
#                  best of 5 passes, measured each repetition in the same run (median)
# All sides decode the same prompt ids (the peers read them from ctune's --json output: llama.cpp
# gets token ids, nothing is tokenised again), PROMPT_TOKENS long (byte tokenizer: BOS + one token
# per ASCII byte), all of one length so no padding enters. Each side first generates one untimed
# batch of other prompts with the same shapes (ctune: the first --batch-size group of the same
# invocation), so none pays first-call costs (page faults on the weights, oneDNN primitive
# creation) in the timed batch. Sides alternate, and reverse their order each rep, so a noisy
# neighbour (a compiler on the same cores) hits all; read the ratios, not the rates.
#   bash scripts/bench_decode.sh                          # PROMPT_TOKENS=128 NEW_TOKENS=128 BATCHES='1 8' DTYPES='fp32 bf16' REPS=1
#   REPS=3 BATCHES=1 bash scripts/bench_decode.sh         # medians of three runs, batch 1 only
#   NEIGHBOURS=busy0,busy19,ctune bash scripts/bench_decode.sh   # ctune also beside each neighbour
# NEIGHBOURS (scripts/neighbours.sh): each repetition also runs ctune's side beside each named
# neighbour, and a last table gives its decode and prefill rates as ratios to the quiet run of the
# same repetition (docs/performance.md, "Beside a neighbour").
# SUMMARY_ONLY=1 runs nothing and prints the table of the runs in OUT (an interrupted run: its
# complete repetitions).
# Also THREADS (default nproc, all sides), OUT (default /tmp/ctune-bench-decode), CTUNE (the binary),
# LLAMA_CPP_NPM (where node-llama-cpp is installed, by tests/export/fetch_llama_cpp.sh on first use;
# default build/bench-data/node-llama-cpp-3.22.1).
# The eager peer runs with tcmalloc preloaded, as bench.sh's do (scripts/peer_allocator.sh;
# TCMALLOC= for glibc's malloc); the table names the allocator.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
PY=/usr/bin/python3  # Debian's python3 with python3-torch (a pyenv python3 may shadow it)
OUT=${OUT:-/tmp/ctune-bench-decode}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
NEW_TOKENS=${NEW_TOKENS:-128}
BATCHES=${BATCHES:-1 8}
DTYPES=${DTYPES:-fp32 bf16}
REPS=${REPS:-1}
LLAMA=${LLAMA:-1}
SUMMARY_ONLY=${SUMMARY_ONLY:-0}  # 1: run nothing, print the table of the runs already in OUT
LLAMA_CPP_VERSION=3.22.1
LLAMA_CPP_NPM=${LLAMA_CPP_NPM:-build/bench-data/node-llama-cpp-$LLAMA_CPP_VERSION}
THREADS=${THREADS:-$(nproc)}
NEIGHBOURS=${NEIGHBOURS:-}
source scripts/peer_allocator.sh bench_decode
source scripts/neighbours.sh
neighbour_ctune() {  # a second ctune generating the same batch, in a loop
  echo "while :; do $CTUNE --threads $THREADS generate --model $OUT/model --prompt-file $OUT/prompts-b1.txt --batch-size 1 --max-new-tokens $NEW_TOKENS --temperature 0 >/dev/null 2>&1; done"
}
mkdir -p "$OUT"
[[ -f $OUT/model/config.json ]] ||
  $CTUNE init --config recipes/models/smollm2-135m.json --out "$OUT/model" --tokenizer byte --seed 0 --dtype fp32 >/dev/null
gguf_type() { case $1 in fp32) echo f32 ;; bf16) echo bf16 ;; fp16) echo f16 ;; *) echo "DTYPES: fp32, bf16 or fp16, not \"$1\"" >&2; exit 2 ;; esac; }
if ((LLAMA && !SUMMARY_ONLY)); then
  bash tests/export/fetch_llama_cpp.sh "$LLAMA_CPP_NPM" "$LLAMA_CPP_VERSION" >&2
  for D in $DTYPES; do  # the same weights as llama.cpp reads them (the export's self-check runs)
    [[ -f $OUT/model-$(gguf_type "$D").gguf ]] ||
      $CTUNE export --model "$OUT/model" --out "$OUT/model-$(gguf_type "$D").gguf" --type "$(gguf_type "$D")" >/dev/null
  done
fi

# Prompts: 2 x B lines (B warm-up, B timed) of PROMPT_TOKENS - 1 ASCII bytes each, distinct slices
# of the quickstart stories, so every prompt encodes to the same number of tokens.
for B in $BATCHES; do
  $PY - "$OUT/prompts-b$B.txt" "$B" "$PROMPT_TOKENS" <<'PY'
import json, sys
path, batch, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = " ".join(json.loads(l)["text"] for l in open("recipes/quickstart/data/pretrain.jsonl"))
text = "".join(c for c in text if 32 <= ord(c) < 127)  # one byte, one token; no newlines
n = tokens - 1  # the tokenizer adds BOS
with open(path, "w") as f:
    for i in range(2 * batch):
        f.write(text[i * n:(i + 1) * n] + "\n")
PY
done

ctune_side() {  # dtype B rep [neighbour]
  if ! $CTUNE --threads "$THREADS" generate --model "$OUT/model" --prompt-file "$OUT/prompts-b$2.txt" --batch-size "$2" \
    --max-new-tokens "$NEW_TOKENS" --temperature 0 --dtype "$1" --json >"$OUT/ctune-$1-b$2-r$3${4:+-$4}.jsonl" 2>"$OUT/ctune.log"; then
    echo "bench_decode: ctune generate --dtype $1 failed at batch $2, see $OUT/ctune.log" >&2
    exit 1
  fi
}
# The peers' prompt ids come from rep 0's ctune output (the same prompt file every rep).
eager_side() {  # dtype B rep
  LD_PRELOAD=$TCMALLOC $PY scripts/bench_decode.py --model "$OUT/model" --prompts "$OUT/ctune-$1-b$2-r0.jsonl" --batch "$2" \
    --max-new-tokens "$NEW_TOKENS" --threads "$THREADS" >"$OUT/eager-$1-b$2-r$3.json"
}
llama_side() {  # dtype B rep
  local kv=F32
  [[ $1 == fp32 ]] || kv=$(gguf_type "$1" | tr a-z A-Z)
  if ! node scripts/bench_decode_llama.mjs "$LLAMA_CPP_NPM" "$OUT/model-$(gguf_type "$1").gguf" "$OUT/ctune-$1-b$2-r0.jsonl" \
    "$2" "$NEW_TOKENS" "$THREADS" "$kv" >"$OUT/llama-$1-b$2-r$3.json" 2>"$OUT/llama.log"; then
    echo "bench_decode: llama.cpp failed at $1 batch $2, see $OUT/llama.log" >&2
    exit 1
  fi
}
bandwidth() {  # rep: bytes/s of a streaming read with THREADS threads, the best of 5 passes over 1 GiB
  $PY - "$THREADS" >"$OUT/bandwidth-r$1.txt" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x = torch.ones(1 << 28)  # 1 GiB of fp32, touched
best = 0.0
for i in range(6):  # one untimed pass (the threads started), then the best of five
    t = time.perf_counter()
    x.sum()
    best = max(best, x.numel() * 4 / (time.perf_counter() - t)) if i else 0.0
print(best)
PY
}

for ((rep = 0; rep < (SUMMARY_ONLY ? 0 : REPS); rep++)); do
  bandwidth $rep
  for D in $DTYPES; do
    sides=(ctune)
    [[ $D == fp32 ]] && sides+=(eager)
    ((LLAMA)) && sides+=(llama)
    if ((rep % 2 == 1)); then  # reversed order on odd reps
      for ((i = 0, j = ${#sides[@]} - 1; i < j; i++, j--)); do t=${sides[i]}; sides[i]=${sides[j]}; sides[j]=$t; done
    fi
    for B in $BATCHES; do
      for side in "${sides[@]}"; do "${side}_side" "$D" "$B" $rep; done
      for neighbour in ${NEIGHBOURS//,/ }; do
        start_neighbour "$neighbour"
        ctune_side "$D" "$B" $rep "$neighbour"
        stop_neighbour
      done
      echo "done: $D batch $B ($((rep + 1))/$REPS; ${sides[*]})" >&2
    done
  done
done

$PY - "$OUT" "$BATCHES" "$REPS" "$PROMPT_TOKENS" "$NEW_TOKENS" "$THREADS" "${TCMALLOC:-glibc malloc}" "$NEIGHBOURS" "$DTYPES" "$LLAMA" <<'PY'
import json, math, os, statistics, struct, sys
out, batches, reps, P, N, threads, allocator = sys.argv[1], [int(b) for b in sys.argv[2].split()], int(sys.argv[3]), *sys.argv[4:8]
neighbours = [n for n in sys.argv[8].split(",") if n]
dtypes, llama = sys.argv[9].split(), sys.argv[10] != "0"
P, N = int(P), int(N)
med = statistics.median

def ctune(D, B, r, beside=""):  # the timed group: the last B JSON objects (the first B were the warm-up)
    rows = [json.loads(l) for l in open(f"{out}/ctune-{D}-b{B}-r{r}{'-' + beside if beside else ''}.jsonl")][B:]
    return {"prefill": rows[0]["prefill_tokens_per_s"], "decode": rows[0]["decode_tokens_per_s"],
            "peak": rows[0]["peak_memory_bytes"], "ids": [x["generated_ids"] for x in rows],
            "stops": [x["stop_reason"] for x in rows], "prompt_len": len(rows[0]["prompt_ids"])}

def peer(name):
    def read(D, B, r):
        e = json.load(open(f"{out}/{name}-{D}-b{B}-r{r}.json"))
        return {"prefill": e["prefill_tokens_per_s"], "decode": e["decode_tokens_per_s"], "peak": e["peak_memory_bytes"],
                "ids": e["generated_ids"], "stops": e["stop_reasons"], "prompt_len": e["prompt_tokens"]}
    return read

config = json.load(open(f"{out}/model/config.json"))
with open(f"{out}/model/model.safetensors", "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
numel = math.prod
def weight_bytes(D):  # every weight once (tied head: the embedding, read whole by the head); norms fp32 in 16 bits
    size = 4 if D == "fp32" else 2
    return sum(numel(t["shape"]) * (size if len(t["shape"]) == 2 else 4) for t in header.values())
def cache_bytes(D):  # keys and values of every layer at the decode steps' mean length, one sequence
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * d * (P + N / 2) * (4 if D == "fp32" else 2)
bw = med(float(open(f"{out}/bandwidth-r{r}.txt").read()) for r in range(reps) if os.path.exists(f"{out}/bandwidth-r{r}.txt"))
def complete(D, B, names):  # the reps whose every side finished (an interrupted run: the ones before)
    files = lambda r: [f"{out}/ctune-{D}-b{B}-r{r}.jsonl"] + [f"{out}/{n}-{D}-b{B}-r{r}.json" for n in names]
    return [r for r in range(reps) if all(os.path.exists(f) and os.path.getsize(f) > 0 for f in files(r))]

print(f"\n== decode benchmark: SmolLM2-135M shape (30 layers, 134.5M parameters, tied head), random weights")
print(f"   greedy, prompt {P} tokens, up to {N} new, {threads} threads all sides; medians of {reps} run(s); MB = 1e6 bytes")
print(f"   eager = scripts/bench_decode.py: HF-style Llama, torch.cat KV cache (as DynamicCache), eager attention,"
      f" on {allocator}")
if llama:
    print("   llama.cpp = node-llama-cpp 3.22.1 on `ctune export --type f32|bf16`, KV cache F32|BF16, flash attention auto")
print(f"   bandwidth: {bw / 1e9:.1f} GB/s (1 GiB read, {threads} threads, best of 5, median over reps)")
print(f"{'dtype':>5} {'batch':>5}  {'side':16}{'prefill tok/s':>14}{'decode tok/s':>14}{'peak MB':>9}  {'new tokens/seq':>15}  stop")
agree, rates = [], {}
for D in dtypes:
    for B in batches:
        names = (["eager"] if D == "fp32" else []) + (["llama"] if llama else [])
        done = complete(D, B, names)
        if not done:
            print(f"{D:>5} {B:>5}  no complete run")
            continue
        sides = {"ctune": [ctune(D, B, r) for r in done]}
        for n in names:
            sides["llama.cpp" if n == "llama" else n] = [peer(n)(D, B, r) for r in done]
        m = {}
        for side, runs in sides.items():
            m[side] = {k: med(x[k] for x in runs) for k in ("prefill", "decode", "peak")}
            rates[(D, B, side)] = m[side]["decode"]
            lens = [len(i) for i in runs[0]["ids"]]
            stops = ",".join(sorted(set(runs[0]["stops"])))
            if runs[0]["prompt_len"] != P:
                stops += f" (prompt {runs[0]['prompt_len']} tokens, not {P})"
            print(f"{D:>5} {B:>5}  {side:16}{m[side]['prefill']:14.1f}{m[side]['decode']:14.1f}{m[side]['peak'] / 1e6:9.0f}"
                  f"  {min(lens):>7}-{max(lens):<7}  {stops}" + (f" ({len(done)} of {reps} runs)" if len(done) < reps else ""))
        for side in [s for s in sides if s != "ctune"]:
            # Per-run ratios (each run's sides ran back to back), then their median.
            rp = med(c["prefill"] / e["prefill"] for c, e in zip(sides["ctune"], sides[side]))
            rd = med(c["decode"] / e["decode"] for c, e in zip(sides["ctune"], sides[side]))
            print(f"{D:>5} {B:>5}  {'ctune/' + side:16}{rp:13.2f}x{rd:13.2f}x{m['ctune']['peak'] / m[side]['peak']:8.2f}x")
            # Greedy tokens: how many leading tokens of each sequence agree (near-ties may split later).
            for c, e in zip(sides["ctune"][0]["ids"], sides[side][0]["ids"]):
                k = next((i for i, (a, b) in enumerate(zip(c, e)) if a != b), min(len(c), len(e)))
                agree.append((D, B, side, k, len(c), len(e)))
        bound = B * bw / (weight_bytes(D) + B * cache_bytes(D))
        rates[(D, B, "bound")] = bound
        print(f"{D:>5} {B:>5}  {'bandwidth bound':16}{'':>14}{bound:14.1f}  "
              f"({weight_bytes(D) / 1e6:.0f} MB weights + {B} x {cache_bytes(D) / 1e6:.1f} MB cache a step; "
              f"ctune at {m['ctune']['decode'] / bound:.0%})")
for D in dtypes:
    for B in batches:
        for side in sorted({a[2] for a in agree if a[0] == D and a[1] == B}):
            rows = [a for a in agree if a[:3] == (D, B, side)]
            same = sum(1 for *_, k, lc, le in rows if k == lc == le)
            print(f"tokens, {D} batch {B}, ctune vs {side}: {same}/{len(rows)} sequences identical; first difference at "
                  + " ".join(f"{k}/{max(lc, le)}" for *_, k, lc, le in rows))
if "fp32" in dtypes and 1 in batches:
    # At batch 1 a decode step is a chain of matrix-vector products that read every weight once:
    # its rate in weight bytes per second says how near each side is to the memory's.
    for D in dtypes:
        w = weight_bytes(D) + cache_bytes(D)
        if (D, 1, "ctune") not in rates:
            continue
        print(f"{D} batch 1 decode reads {w / 1e6:.0f} MB per token: "
              + ", ".join(f"{s} {rates[(D, 1, s)] * w / 1e9:.1f} GB/s" for s in ("ctune", "eager", "llama.cpp") if (D, 1, s) in rates)
              + f" (read bandwidth {bw / 1e9:.1f} GB/s)")
    if ("fp32", 1, "eager") in rates:
        done = complete("fp32", 1, ["eager"])
        r = med(c["decode"] / e["decode"] for c, e in zip([ctune("fp32", 1, i) for i in done],
                                                           [peer("eager")("fp32", 1, i) for i in done]))
        print(f"goal: decode >= 1.5x eager at batch 1: {'met' if r >= 1.5 else 'not met'} ({r:.2f}x)")
if neighbours:
    print("\nbeside a neighbour: ctune's rate over its quiet rate in the same repetition (median), decode / prefill")
    print("| dtype | batch | quiet decode tok/s | " + " | ".join(neighbours) + " |")
    print("|---|---|---|" + "---|" * len(neighbours))
    for D in dtypes:
        for B in batches:
            quiet = [ctune(D, B, r) for r in range(reps)]
            cells = []
            for n in neighbours:
                beside = [ctune(D, B, r, n) for r in range(reps)]
                d = med(b["decode"] / q["decode"] for b, q in zip(beside, quiet))
                p = med(b["prefill"] / q["prefill"] for b, q in zip(beside, quiet))
                cells.append(f"{d:.2f} / {p:.2f}")
            print(f"| {D} | {B} | {med(q['decode'] for q in quiet):.1f} | " + " | ".join(cells) + " |")
PY
