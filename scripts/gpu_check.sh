#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, a compiler, CMake and a CUDA PyTorch (the
# device machine of docs/gpu.md), run from the repository root with third_party/prefix
# brought along (scripts/vendor_deps.sh fills it where apt works). In one go, every step timed:
#   1. build: ctune and its CUDA test against the PyTorch installation's LibTorch, every other
#      dependency from third_party/prefix (-DCTUNE_THIRD_PARTY=ON);
#   2. test: tests/cli/test_cuda (a GPU run follows the CPU run, resume, bf16 learns);
#   3. bench: a Llama-3.2-1B-shaped random model (recipes/models/llama-3.2-1b.json), LoRA rank 16
#      on all seven projections, seq SEQ x batch BATCH, bf16: ctune train (device: cuda) and
#      Hugging Face transformers + PEFT (scripts/bench_hf_peft.py) on the same weights, with
#      tokens/s, peak GPU memory and model FLOP utilisation against a bf16 GEMM measured here.
# Logs and the table go to $OUT (or runs/gpu_check). Steps: STEPS=build,test,bench (default all).
# Aimed at 5 minutes of machine time on a 16-core H200 machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
STEPS=${STEPS:-build,test,bench}
SEQ=${SEQ:-2048}
BATCH=${BATCH:-4}
TRAIN_STEPS=${TRAIN_STEPS:-10}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[gpu_check +$(($(date +%s) - T0))s] $*" | tee -a "$OUT/summary.txt"; }
has() { [[ ,$STEPS, == *,$1,* ]]; }

say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1); $(nproc) cores"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || { say "no python3 torch"; exit 1; }
say "torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"

if has build; then
  [[ -f third_party/prefix/usr/lib/x86_64-linux-gnu/pkgconfig/sentencepiece.pc ]] ||
    { say "third_party/prefix is missing: run scripts/vendor_deps.sh where apt works and bring it along"; exit 1; }
  cmake -S . -B "$BUILD" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DCTUNE_THIRD_PARTY=ON >"$OUT/configure.log" 2>&1 ||
    { say "configure failed (configure.log)"; tail -30 "$OUT/configure.log"; exit 1; }
  cmake --build "$BUILD" -j "$(nproc)" --target ctune test_cuda >"$OUT/build.log" 2>&1 ||
    { say "build failed (build.log)"; grep -m 20 -B2 -A6 "error" "$OUT/build.log"; exit 1; }
  say "build: done"
fi
CTUNE=$BUILD/bin/ctune

if has test; then
  (cd "$BUILD" && ctest -R '^Cuda\.' --output-on-failure) >"$OUT/test.log" 2>&1
  say "test: $(grep -E 'tests passed|tests failed' "$OUT/test.log" | tail -1)"
  grep -q "Skipped" "$OUT/test.log" && say "test: SKIPPED (is a GPU visible?): $(grep -m1 -i skip "$OUT/test.log")"
fi

if has bench; then
  W=runs/gpu_bench
  mkdir -p "$W"
  [[ -f $W/model/config.json ]] ||
    $CTUNE init --config recipes/models/llama-3.2-1b.json --out "$W/model" --tokenizer byte --seed 0 --dtype bf16 >"$OUT/init.log" 2>&1 ||
    { say "ctune init failed (init.log)"; exit 1; }
  python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
stories = [json.loads(l)["text"] for l in open("recipes/quickstart/data/pretrain.jsonl")]
with open(f"{w}/long.jsonl", "w") as f:  # documents longer than a row: every row is full
    for i in range(0, len(stories) - 60, 20):
        f.write(json.dumps({"text": " ".join(stories[i:i + 60])}) + "\n")
PY
  cat >"$W/recipe.yaml" <<YAML
output_dir: $W/run
seed: 0
device: cuda
model: {path: $W/model, dtype: bf16}
data: {train: $W/long.jsonl, format: text, max_seq_len: $SEQ, packing: false}
peft: {method: lora, rank: 16, alpha: 32, dropout: 0.0,
       target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}
precision: bf16
optimizer: {name: adamw, lr: 1.0e-4, weight_decay: 0.0}
scheduler: {name: constant, warmup_steps: 0}
training: {batch_size: $BATCH, grad_accum: 1, max_steps: $TRAIN_STEPS, eval_every: 0}
checkpoint: {every_n_steps: 0}
logging: {every_n_steps: 1}
YAML
  python3 scripts/bench_hf_peft.py gemm >"$OUT/gemm.json" 2>"$OUT/gemm.log"
  rm -rf "$W/run"
  $CTUNE train "$W/recipe.yaml" --overwrite >"$OUT/ctune_train.log" 2>&1 || say "ctune train failed (ctune_train.log): $(tail -1 "$OUT/ctune_train.log")"
  python3 scripts/bench_hf_peft.py step --model "$W/model" --seq "$SEQ" --batch "$BATCH" --steps "$TRAIN_STEPS" --rank 16 \
    >"$OUT/hf.json" 2>"$OUT/hf.log" || say "transformers + PEFT failed (hf.log): $(tail -1 "$OUT/hf.log")"
  python3 - "$W" "$OUT" "$SEQ" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
w, out, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = json.load(open("recipes/models/llama-3.2-1b.json"))
H, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
nh, nkv, d, r = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], 16
n = L * (H * nh * d * 2 + H * nkv * d * 2 + 3 * H * I) + H * V           # matmul weights, head included
shapes = [(H, nh * d), (H, nkv * d), (H, nkv * d), (nh * d, H), (H, I), (H, I), (I, H)]
trainable = L * sum(r * (a + b) for a, b in shapes)
per_token = 2 * (n + trainable) + 2 * (n + trainable) + 2 * trainable + 3 * L * 4 * seq * nh * d
gemm = json.load(open(f"{out}/gemm.json"))["flops_per_s"]
steps, memory = [], {}
try:
    for line in open(f"{w}/run/metrics.jsonl"):
        j = json.loads(line)
        if "memory" in j: memory = j["memory"]
        elif "loss" in j: steps.append(j)
except FileNotFoundError:
    pass
rows = {}
if steps:
    timed = steps[1:] or steps
    rows["ctune"] = (statistics.median(s["tokens_per_s"] for s in timed), memory.get("measured_peak_bytes", max(s["peak_mem_bytes"] for s in steps)))
try:
    hf = json.load(open(f"{out}/hf.json"))
    rows["transformers + PEFT"] = (hf["tokens_per_s"], hf["peak_bytes"])
except (FileNotFoundError, json.JSONDecodeError, KeyError):
    pass
print(f"bf16 GEMM 8192^3 measured: {gemm / 1e12:.0f} TFLOP/s; model FLOPs per token {per_token / 1e9:.2f} G")
print("| workload | runner | tokens/s | peak GPU MB | MFU |")
print("|---|---|---|---|---|")
for name, (tps, peak) in rows.items():
    print(f"| Llama-3.2-1B shape, LoRA r16 all projections, bf16, seq {seq} | {name} | {tps:.0f} | {peak / 1e6:.0f} | {tps * per_token / gemm:.1%} |")
if len(rows) == 2:
    c, h = rows["ctune"], rows["transformers + PEFT"]
    print(f"ratio ctune / transformers+PEFT: tokens/s {c[0] / h[0]:.2f}x, peak memory {c[1] / h[1]:.2f}x")
PY
fi
say "done"
