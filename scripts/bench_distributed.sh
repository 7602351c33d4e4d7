#!/usr/bin/env bash
# Several ranks on this machine, side by side: for N = 1, 2, 4 ranks and each implemented
# strategy, full fine-tuning of a 4-layer model (hidden 512, 12.6M parameters, fp32, AdamW) on a
# fixed global batch, and one table: median step time, the share of rank 0's training time spent
# in collectives, and rank 0's memory measured against `ctune estimate --nproc N`'s prediction
# (the optimizer-state line shows what sharding divides). Not part of the test run (minutes).
#   bash scripts/bench_distributed.sh              # STEPS=6 GLOBAL_BATCH=8 SEQ=256
# On one machine the ranks share its cores (threads: auto gives each its share), so step times
# say what communication and splitting cost here, not what more machines would gain.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
OUT=${OUT:-runs/bench-distributed}
STEPS=${STEPS:-6}
GLOBAL_BATCH=${GLOBAL_BATCH:-8}
SEQ=${SEQ:-256}
mkdir -p "$OUT"
cat >"$OUT/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 320, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 4, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
[[ -f $OUT/base/config.json ]] || $CTUNE init --config "$OUT/config.json" --out "$OUT/base" --tokenizer byte --seed 0 >/dev/null
cat >"$OUT/bench.yaml" <<YAML
seed: 0
model: {path: $OUT/base}
data: {train: recipes/quickstart/data/pretrain.jsonl, format: text, max_seq_len: $SEQ, packing: true}
peft: {method: none}
optimizer: {name: adamw, lr: 1.0e-4}
scheduler: {name: constant, warmup_steps: 0}
training: {batch_size: 1, grad_accum: 1, max_steps: $STEPS, eval_every: 0}
checkpoint: {every_n_steps: 1000000}
memory: {allocator: exact}
YAML

: >"$OUT/results.jsonl"
for n in 1 2 4; do
  for strategy in no_shard shard_grad_op; do
    [[ $n -eq 1 && $strategy != no_shard ]] && continue
    run="$OUT/run-$n-$strategy"
    rm -rf "$run"
    args=(train "$OUT/bench.yaml" output_dir="$run" training.batch_size=$((GLOBAL_BATCH / n)) distributed.strategy=$strategy)
    [[ $n -gt 1 ]] && args+=(--nproc "$n")
    if ! $CTUNE "${args[@]}" >"$run.log" 2>&1; then
      echo "N=$n $strategy: ctune train failed, see $run.log" >&2
      exit 1
    fi
    $CTUNE estimate "$OUT/bench.yaml" output_dir="$run" training.batch_size=$((GLOBAL_BATCH / n)) \
      distributed.strategy=$strategy --nproc "$n" --json >"$run.estimate.json"
    comm=$(grep -o "spent [0-9.]* s of [0-9.]* s" "$run.log" | head -1 || true)
    /usr/bin/python3 - "$n" "$strategy" "$run/metrics.jsonl" "$run.estimate.json" "$comm" >>"$OUT/results.jsonl" <<'PY'
import json, sys
n, strategy, metrics, estimate, comm = sys.argv[1:6]
steps, memory = [], None
for line in open(metrics):
    j = json.loads(line)
    if "memory" in j: memory = j["memory"]
    elif "loss" in j: steps.append(j["elapsed_s"])
times = sorted(b - a for a, b in zip(steps, steps[1:]))  # the first step warms up
est = json.load(open(estimate))
lines = {l["name"]: l["bytes"] for l in est["lines"]}
waited, total = (float(comm.split()[1]), float(comm.split()[4])) if comm else (0.0, 1.0)
print(json.dumps({"n": int(n), "strategy": strategy, "step_s": times[len(times) // 2], "comm": waited / total,
                  "measured": memory["measured_peak_bytes"], "start": memory["measured_start_bytes"],
                  "predicted": est["peak_bytes"], "optimizer": lines["optimizer state"]}))
PY
    echo "done: N=$n $strategy" >&2
  done
done

/usr/bin/python3 - "$OUT/results.jsonl" "$GLOBAL_BATCH" "$SEQ" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n== distributed benchmark: 4 layers, hidden 512 (12.6M parameters), full fine-tuning fp32 AdamW, global batch {sys.argv[2]} x {sys.argv[3]} tokens; MB = 1e6 bytes; memory is rank 0's")
print(f"{'N':>2} {'strategy':14}{'step s':>8}{'x N=1':>7}{'comm %':>8}{'optimizer MB':>13}{'predicted MB':>13}{'measured MB':>12}{'meas/pred':>10}")
base = rows[0]
for r in rows:
    print(f"{r['n']:>2} {r['strategy']:14}{r['step_s']:8.3f}{r['step_s']/base['step_s']:7.2f}{100*r['comm']:8.1f}"
          f"{r['optimizer']/1e6:13.1f}{r['predicted']/1e6:13.1f}{r['measured']/1e6:12.1f}{r['measured']/r['predicted']:10.3f}")
PY
