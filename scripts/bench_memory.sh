#!/usr/bin/env bash
# The memory benchmark of issue 5, in one invocation on one machine: a SmolLM2-135M-shaped model
# (30 layers, random weights, recipes/models/smollm2-135m.json) trained for a few steps at
# sequence length 512 in each configuration of the grid, and one table: predicted peak (the
# ledger of `ctune estimate`), measured peak (VmHWM during training), step time, and ratios
# against the baseline row of each group. Not part of the test run (minutes, not seconds).
#   bash scripts/bench_memory.sh            # SEQ=512 STEPS=4 BATCH=1 ALLOCATOR=fast by default
# MODEL_CONFIG=FILE measures another shape (any family; give it its own OUT), e.g.
#   MODEL_CONFIG=recipes/models/qwen3-0.6b.json OUT=runs/bench-memory-qwen3 bash scripts/bench_memory.sh
# ALLOCATOR=exact runs every row with memory.allocator: exact (resident memory follows live tensors).
# ONLY='full fp32,lora bf16' runs the rows whose name is one of these (the per-family check of
# issue 27), e.g. with a family's config on the SmolLM2 shape at BATCH=4.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
OUT=${OUT:-runs/bench-memory}
MODEL_CONFIG=${MODEL_CONFIG:-recipes/models/smollm2-135m.json}
SEQ=${SEQ:-512}
STEPS=${STEPS:-4}
BATCH=${BATCH:-1}
ALLOCATOR=${ALLOCATOR:-fast}
ONLY=${ONLY:-}
mkdir -p "$OUT"
[[ -f $OUT/base/config.json ]] ||
  $CTUNE init --config "$MODEL_CONFIG" --out "$OUT/base" --tokenizer byte --seed 0 --dtype fp32 >/dev/null

cat >"$OUT/bench.yaml" <<YAML
output_dir: $OUT/run
seed: 0
model: {path: $OUT/base, dtype: fp32}
data: {train: recipes/quickstart/data/pretrain.jsonl, format: text, max_seq_len: $SEQ, packing: true}
peft: {method: lora, rank: 8, alpha: 16, target_modules: [all-linear]}
optimizer: {name: adamw, lr: 1.0e-4}
scheduler: {name: constant, warmup_steps: 0}
training: {batch_size: $BATCH, grad_accum: 1, max_steps: $STEPS, eval_every: 0}
logging: {every_n_steps: 1}
YAML

# name | group (ratios are against the group's first row) | overrides
GRID=(
  "full fp32|full|peft.method=none"
  "full fp32 ckpt|full|peft.method=none memory.activation_checkpointing=full"
  "full bf16|full|peft.method=none precision=bf16"
  "full bf16 ckpt|full|peft.method=none precision=bf16 memory.activation_checkpointing=full"
  "lora fp32|lora|"
  "lora fp32 ckpt|lora|memory.activation_checkpointing=full"
  "lora bf16|lora|precision=bf16"
  "lora bf16 ckpt|lora|precision=bf16 memory.activation_checkpointing=full"
  "lora bf16 selective|lora|precision=bf16 memory.activation_checkpointing=selective"
  "lora bf16 int8|lora|precision=bf16 memory.quantize_base=int8"
  "lora bf16 nf4|lora|precision=bf16 memory.quantize_base=nf4"
  "lora bf16 no chunked loss|lora|precision=bf16 memory.chunked_loss=false"
)
: >"$OUT/results.jsonl"
echo "memory.allocator: $ALLOCATOR" >&2
for row in "${GRID[@]}"; do
  IFS='|' read -r name group overrides <<<"$row"
  [[ -z $ONLY || ",$ONLY," == *",$name,"* ]] || continue
  run="$OUT/run-${name// /-}"
  rm -rf "$run"
  # shellcheck disable=SC2086
  if ! $CTUNE train "$OUT/bench.yaml" output_dir="$run" memory.allocator="$ALLOCATOR" $overrides >"$run.log" 2>&1; then
    echo "$name: ctune train failed, see $run.log" >&2
    exit 1
  fi
  quant=$(grep -o "MB -> [0-9.]* MB" "$run/train.log" | head -1 || true)
  /usr/bin/python3 - "$name" "$group" "$run/metrics.jsonl" "$quant" >>"$OUT/results.jsonl" <<'PY'
import json, sys
name, group, path, quant = sys.argv[1:5]
steps, memory = [], None
for line in open(path):
    j = json.loads(line)
    if "memory" in j: memory = j["memory"]
    elif "loss" in j: steps.append(j["elapsed_s"])
times = [b - a for a, b in zip(steps, steps[1:])]  # the first step warms up
lines = {l["name"]: l["bytes"] for l in memory["lines"]}
print(json.dumps({"name": name, "group": group, "predicted": memory["peak_bytes"], "measured": memory["measured_peak_bytes"],
                  "start": memory["measured_start_bytes"], "step_s": sorted(times)[len(times) // 2], "lines": lines,
                  "quantized": quant}))
PY
  echo "done: $name" >&2
done

cp "$OUT/results.jsonl" "$OUT/results-$ALLOCATOR.jsonl"
/usr/bin/python3 - "$OUT/results.jsonl" "$SEQ" "$BATCH" "$ALLOCATOR" "$MODEL_CONFIG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cfg = json.load(open(sys.argv[5]))
print(f"\n== memory benchmark: {sys.argv[5]} ({cfg['model_type']}, {cfg['num_hidden_layers']} layers), seq {sys.argv[2]}, batch {sys.argv[3]}, memory.allocator {sys.argv[4]}; MB = 1e6 bytes")
print("   step mem = measured peak - resident when training began; x = ratio to the group's first row")
print(f"{'config':27}{'predicted':>10}{'measured':>10}{'pred/meas':>10}{'step mem':>10}{'step s':>8}{'x peak':>8}{'x step mem':>11}{'x time':>8}")
base = {}
for r in rows:
    b = base.setdefault(r["group"], r)
    step_mem = r["measured"] - r["start"]  # what training adds on top of the loaded model
    b_mem = b["measured"] - b["start"]
    print(f"{r['name']:27}{r['predicted']/1e6:10.1f}{r['measured']/1e6:10.1f}{r['predicted']/r['measured']:10.3f}"
          f"{step_mem/1e6:10.1f}{r['step_s']:8.2f}{r['measured']/b['measured']:8.3f}{step_mem/b_mem:11.3f}{r['step_s']/b['step_s']:8.3f}")
by = {r["name"]: r for r in rows}
def line(n, k): return by[n]["lines"][k]
if "lora bf16" in by:
    print("\nledger lines (MB):", ", ".join(f"{k} {v/1e6:.1f}" for k, v in by["lora bf16"]["lines"].items()))
if "full fp32" in by and "lora fp32" in by:
    full = line("full fp32", "gradients") + line("full fp32", "optimizer state")
    lora = line("lora fp32", "gradients") + line("lora fp32", "optimizer state")
    print(f"LoRA gradients + optimizer state: {lora/1e6:.2f} MB vs full {full/1e6:.1f} MB = {lora/full:.4f}x")
for q in ("lora bf16 int8", "lora bf16 nf4"):
    if q in by and "lora bf16" in by: print(f"{q}: projection weights {by[q]['quantized']} (bf16 -> quantised), ledger weights {line(q, 'weights')/1e6:.1f} MB vs bf16 {line('lora bf16', 'weights')/1e6:.1f} MB")
if "lora bf16 no chunked loss" in by and "lora bf16" in by:
    u, c = by["lora bf16 no chunked loss"], by["lora bf16"]
    print(f"chunked loss: measured peak {c['measured']/1e6:.1f} MB vs {u['measured']/1e6:.1f} MB without (saves {(u['measured']-c['measured'])/1e6:.1f} MB); "
          f"ledger loss buffers {line('lora bf16', 'logits and loss')/1e6:.1f} MB vs {line('lora bf16 no chunked loss', 'logits and loss')/1e6:.1f} MB")
worst = max(abs(r["predicted"] / r["measured"] - 1) for r in rows)
print(f"ledger accuracy: worst |predicted/measured - 1| = {worst:.3f} over {len(rows)} configurations")
PY
