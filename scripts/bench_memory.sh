#!/usr/bin/env bash
# The memory ledger against measurement (issues 5 and 31), in one invocation on one machine: each
# configuration of the grid trained for a few steps, and one table: predicted peak (the ledger of
# `ctune estimate`), measured peak (VmHWM during training, per rank), step time, and ratios
# against the baseline row of each group. Not part of the test run (minutes, not seconds).
# Three shapes, random weights, byte tokenizer, the quickstart's pretraining text packed:
#   smol   SmolLM2-135M (recipes/models/smollm2-135m.json: 30 layers, hidden 576, vocab 49152,
#          tied), sequence 512, batch 1 (SEQ, BATCH); MODEL_CONFIG=FILE puts another config here
#   h512   the case of issue 31: Llama, hidden 512, 8 layers, vocabulary 512, sequence 256, batch 4
#   qwen3  Qwen3-0.6B's layer (hidden 1024, GQA 16/8, head 128, q/k norms, vocab 151936, tied)
#          with 4 layers, sequence 256, batch 2
#   gqa    h512 with 8/4 heads (issue 70's shape); deep: hidden 256, 16 layers, 8/2 heads,
#          vocabulary 8192, sequence 512, batch 2 (neither shaped the ledger's terms)
# LoRA rows are rank 8 on all linear layers unless named "q/v". "2 ranks" rows run two processes
# (--nproc 2, one thread each); the measured peak is rank 0's. Rows named "exact" run with
# memory.allocator: exact, the others with the default allocator (ALLOCATOR=exact: all rows).
#   bash scripts/bench_memory.sh                       # every row, STEPS=4
#   ONLY='full fp32,lora bf16' bash scripts/bench_memory.sh   # the rows with these names
#   MODEL_CONFIG=recipes/models/qwen3-0.6b.json OUT=runs/bench-memory-qwen3 ONLY='full fp32,lora bf16' bash scripts/bench_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
OUT=${OUT:-runs/bench-memory}
MODEL_CONFIG=${MODEL_CONFIG:-recipes/models/smollm2-135m.json}
SEQ=${SEQ:-512}
STEPS=${STEPS:-4}
BATCH=${BATCH:-1}
ALLOCATOR=${ALLOCATOR:-}
ONLY=${ONLY:-}
mkdir -p "$OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
h512 = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=512, hidden_size=512, intermediate_size=1376,
            num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048, rms_norm_eps=1e-5,
            rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)
json.dump(h512, open(f"{out}/h512.json", "w"), indent=1)
qwen3 = json.load(open("recipes/models/qwen3-0.6b.json"))
qwen3.update(num_hidden_layers=4, bos_token_id=256, eos_token_id=257)
json.dump(qwen3, open(f"{out}/qwen3.json", "w"), indent=1)
# Shapes unlike the calibration ones (issue 70): issue 70's h512 with grouped queries (8/4), and a
# deep narrow model with a larger vocabulary and long rows.
gqa = dict(h512, num_key_value_heads=4)
json.dump(gqa, open(f"{out}/gqa.json", "w"), indent=1)
deep = dict(h512, hidden_size=256, intermediate_size=704, num_hidden_layers=16, num_attention_heads=8, num_key_value_heads=2,
            vocab_size=8192)
json.dump(deep, open(f"{out}/deep.json", "w"), indent=1)
PY
declare -A SHAPE=(  # shape -> config | sequence | batch
  [smol]="$MODEL_CONFIG|$SEQ|$BATCH"
  [h512]="$OUT/h512.json|256|4"
  [qwen3]="$OUT/qwen3.json|256|2"
  [gqa]="$OUT/gqa.json|256|4"
  [deep]="$OUT/deep.json|512|2"
)
for shape in "${!SHAPE[@]}"; do
  IFS='|' read -r config _ _ <<<"${SHAPE[$shape]}"
  [[ -f $OUT/$shape/config.json ]] ||
    $CTUNE init --config "$config" --out "$OUT/$shape" --tokenizer byte --seed 0 --dtype fp32 >/dev/null
done

cat >"$OUT/bench.yaml" <<YAML
output_dir: $OUT/run
seed: 0
model: {path: $OUT/smol, dtype: fp32}
data: {train: recipes/quickstart/data/pretrain.jsonl, format: text, max_seq_len: $SEQ, packing: true}
peft: {method: lora, rank: 8, alpha: 16, target_modules: [all-linear]}
optimizer: {name: adamw, lr: 1.0e-4}
scheduler: {name: constant, warmup_steps: 0}
training: {batch_size: $BATCH, grad_accum: 1, max_steps: $STEPS, eval_every: 0}
logging: {every_n_steps: 1}
YAML

FULL=peft.method=none QV='peft.target_modules=[q_proj,v_proj]' BF16=precision=bf16 CKPT=memory.activation_checkpointing
# name | shape | group (ratios are against the group's first row) | overrides
GRID=(
  "full fp32|smol|full|$FULL"
  "full fp32 ckpt|smol|full|$FULL $CKPT=full"
  "full bf16|smol|full|$FULL $BF16"
  "full bf16 ckpt|smol|full|$FULL $BF16 $CKPT=full"
  "full bf16 exact|smol|full|$FULL $BF16 memory.allocator=exact"
  "lora fp32|smol|lora|"
  "lora fp32 ckpt|smol|lora|$CKPT=full"
  "lora bf16|smol|lora|$BF16"
  "lora bf16 ckpt|smol|lora|$BF16 $CKPT=full"
  "lora bf16 selective|smol|lora|$BF16 $CKPT=selective"
  "lora bf16 every 2nd|smol|lora|$BF16 $CKPT=every_n:2"
  "lora bf16 int8|smol|lora|$BF16 memory.quantize_base=int8"
  "lora bf16 nf4|smol|lora|$BF16 memory.quantize_base=nf4"
  "lora bf16 no chunked loss|smol|lora|$BF16 memory.chunked_loss=false"
  "lora bf16 q/v|smol|lora|$BF16 $QV"
  "lora bf16 exact|smol|lora|$BF16 memory.allocator=exact"
  "h512 lora fp32|h512|h512|"
  "h512 lora fp32 q/v|h512|h512|$QV"
  "h512 full fp32|h512|h512|$FULL"
  "h512 lora fp32 exact|h512|h512|memory.allocator=exact"
  "h512 lora fp32 2 ranks|h512|h512|threads=1 --nproc 2"
  "h512 full fp32 2 ranks full_shard|h512|h512|$FULL threads=1 distributed.strategy=full_shard --nproc 2"
  "h512 full fp32 2 ranks shard_grad_op|h512|h512|$FULL threads=1 distributed.strategy=shard_grad_op --nproc 2"
  "qwen3 lora bf16|qwen3|qwen3|$BF16"
  "qwen3 lora bf16 nf4|qwen3|qwen3|$BF16 memory.quantize_base=nf4"
  "qwen3 full bf16|qwen3|qwen3|$FULL $BF16"
  "qwen3 full bf16 selective|qwen3|qwen3|$FULL $BF16 $CKPT=selective"
  "qwen3 lora bf16 2 ranks|qwen3|qwen3|$BF16 threads=1 --nproc 2"
  "gqa lora fp32|gqa|gqa|"
  "gqa lora fp32 ckpt|gqa|gqa|$CKPT=full"
  "gqa full fp32|gqa|gqa|$FULL"
  "gqa full fp32 ckpt|gqa|gqa|$FULL $CKPT=full"
  "deep lora fp32|deep|deep|"
  "deep lora fp32 ckpt|deep|deep|$CKPT=full"
  "deep lora bf16|deep|deep|$BF16"
  "deep lora bf16 ckpt|deep|deep|$BF16 $CKPT=full"
  "deep lora bf16 every 2nd|deep|deep|$BF16 $CKPT=every_n:2"
  "deep full fp32 ckpt|deep|deep|$FULL $CKPT=full"
)
: >"$OUT/results.jsonl"
for row in "${GRID[@]}"; do
  IFS='|' read -r name shape group overrides <<<"$row"
  [[ -z $ONLY || ",$ONLY," == *",$name,"* ]] || continue
  IFS='|' read -r _ seq batch <<<"${SHAPE[$shape]}"
  run="$OUT/run-${name//[ \/]/-}"
  rm -rf "$run"
  # shellcheck disable=SC2086
  if ! $CTUNE train "$OUT/bench.yaml" output_dir="$run" model.path="$OUT/$shape" data.max_seq_len="$seq" training.batch_size="$batch" \
    ${ALLOCATOR:+memory.allocator=$ALLOCATOR} $overrides >"$run.log" 2>&1; then
    echo "$name: ctune train failed, see $run.log" >&2
    exit 1
  fi
  quant=$(grep -o "[0-9.]* MB -> [0-9.]* MB" "$run/train.log" | head -1 || true)
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

/usr/bin/python3 - "$OUT/results.jsonl" "$SEQ" "$BATCH" "${ALLOCATOR:-per row}" "$MODEL_CONFIG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n== memory benchmark: smol = {sys.argv[5]} seq {sys.argv[2]} batch {sys.argv[3]}, h512 seq 256 batch 4, qwen3 seq 256 batch 2; memory.allocator {sys.argv[4]}; MB = 1e6 bytes")
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
under = min(r["predicted"] / r["measured"] for r in rows)
within = sum(abs(r["predicted"] / r["measured"] - 1) <= 0.10 for r in rows)
print(f"ledger accuracy: worst |predicted/measured - 1| = {worst:.3f} over {len(rows)} configurations ({within} within 10%); "
      f"lowest predicted/measured {under:.3f} (under-predicted by {max(0, 1 - under) * 100:.1f}%)")
PY
