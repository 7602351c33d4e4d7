#!/usr/bin/env bash
# Several ranks on this machine, side by side: for N = 1, 2, 4 ranks and each strategy
# (full_shard with and without prefetch; hybrid_shard as 2 simulated nodes of 2), full
# fine-tuning of a 4-layer model (hidden 512, 11.8M parameters, fp32, AdamW) on a fixed global
# batch, and one table: median step time, the share of rank 0's training time spent waiting in
# collectives, rank 0's parameters + gradients + optimizer state at their peak (measured by
# walking the tensors) against `ctune estimate`'s figure and against the full_shard bound
# (1/N of one process's + one block whole + 10%; with experts also that block's gradients, which
# are reduced together after its backward: docs/distributed.md#mixtures-of-experts), and the
# resident peak measured vs predicted.
# full_shard runs without and with distributed.prefetch (which keeps two blocks whole).
# Not part of the test run (about 20 minutes on 2 cores; CONFIGS="1 no_shard,4 full_shard" runs a
# subset, the first being the baseline; MODEL_CONFIG=FILE another config.json, e.g. one with experts).
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
if [[ -n ${MODEL_CONFIG:-} ]]; then
  cp "$MODEL_CONFIG" "$OUT/config.json"
else
  cat >"$OUT/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 320, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 4, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
fi
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
# hybrid_shard on one machine: 4 ranks started by hand as 2 nodes of 2 (LOCAL_WORLD_SIZE=2).
run_hybrid() {  # run_dir args...
  local run=$1 port pids=() r status=0
  shift
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for r in 0 1 2 3; do
    RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $CTUNE "$@" >"$run.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || status=1; done
  cp "$run.rank0.log" "$run.log"
  return $status
}

CONFIGS=${CONFIGS:-"1 no_shard,2 no_shard,2 shard_grad_op,2 full_shard,2 full_shard prefetch,4 no_shard,4 shard_grad_op,4 full_shard,4 full_shard prefetch,4 hybrid_shard"}
IFS=, read -r -a configs <<<"$CONFIGS"
for config in "${configs[@]}"; do
  read -r n strategy variant <<<"$config"
  prefetch=false
  [[ ${variant:-} == prefetch ]] && prefetch=true
  name="$strategy${variant:+-$variant}"
  run="$OUT/run-$n-$name"
  rm -rf "$run"
  keys=(output_dir="$run" training.batch_size=$((GLOBAL_BATCH / n)) distributed.strategy=$strategy distributed.prefetch=$prefetch)
  if [[ $strategy == hybrid_shard ]]; then
    run_hybrid "$run" train "$OUT/bench.yaml" "${keys[@]}" || { echo "N=$n $name: ctune train failed, see $run.rank*.log" >&2; exit 1; }
    nodes=2
  else
    args=(train "$OUT/bench.yaml" "${keys[@]}")
    [[ $n -gt 1 ]] && args+=(--nproc "$n")
    if ! $CTUNE "${args[@]}" >"$run.log" 2>&1; then
      echo "N=$n $name: ctune train failed, see $run.log" >&2
      exit 1
    fi
    nodes=1
  fi
  $CTUNE estimate "$OUT/bench.yaml" "${keys[@]}" --nproc "$n" --nodes "$nodes" --json >"$run.estimate.json"
  comm=$(grep -o "spent [0-9.]* s of [0-9.]* s" "$run.log" | head -1 || true)
  /usr/bin/python3 - "$n" "$name" "$run/metrics.jsonl" "$run.estimate.json" "$comm" >>"$OUT/results.jsonl" <<'PY'
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
                  "measured": memory["measured_peak_bytes"], "predicted": est["peak_bytes"],
                  "state": memory["measured_state_bytes"], "state_predicted": est["state_bytes"]}))
PY
  echo "done: N=$n $name" >&2
done

/usr/bin/python3 - "$OUT/results.jsonl" "$GLOBAL_BATCH" "$SEQ" "$OUT/config.json" "$OUT/base" <<'PY'
import glob, json, math, struct, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
c = json.load(open(sys.argv[4]))
# One decoder block's fp32 parameters, and the model's, from the checkpoint's own tensor list.
block = total = 0
for f in glob.glob(f"{sys.argv[5]}/*.safetensors"):
    with open(f, "rb") as fh:
        header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
    for name, t in header.items():
        if name == "__metadata__": continue
        n = math.prod(t["shape"])
        total += n
        if name.startswith("model.layers.0."): block += 4 * n
moe = f", {c['num_experts']} experts top {c['num_experts_per_tok']}" if "num_experts" in c else ""
print(f"\n== distributed benchmark: {c['model_type']}{moe}, {c['num_hidden_layers']} layers, hidden {c['hidden_size']} ({total / 1e6:.1f}M parameters), full fine-tuning fp32 AdamW, global batch {sys.argv[2]} x {sys.argv[3]} tokens; MB = 1e6 bytes; figures are rank 0's")
print("state = parameters + gradients + optimizer state at their peak, measured by walking the tensors (checkpoint writes excluded);")
whole = 2 * block if "num_experts" in c or "num_local_experts" in c else block  # experts: the block's gradients too
print(f"bound = one process's state / S + one block whole{' with its gradients' if whole > block else ''} + 10% where S ranks share the parameters (N; hybrid_shard: a node's); peak = resident memory")
print(f"{'N':>2} {'strategy':24}{'step s':>8}{'x N=1':>7}{'comm %':>8}{'state MB':>10}{'predicted':>10}{'bound':>8}{'peak MB':>9}{'predicted':>10}{'meas/pred':>10}")
base = rows[0]
for r in rows:
    shards = r["n"] // 2 if r["strategy"].startswith("hybrid") else r["n"]  # hybrid: 2 nodes
    sharded = r["strategy"].startswith(("full_shard", "hybrid_shard"))
    bound = (base["state"] / shards + whole) * 1.1
    within = (" ok" if r["state"] <= bound else " over") if sharded else ""
    print(f"{r['n']:>2} {r['strategy']:24}{r['step_s']:8.3f}{r['step_s']/base['step_s']:7.2f}{100*r['comm']:8.1f}"
          f"{r['state']/1e6:10.1f}{r['state_predicted']/1e6:10.1f}{(f'{bound/1e6:8.1f}' if sharded else '       -')}{within:5}{r['measured']/1e6:9.1f}{r['predicted']/1e6:10.1f}{r['measured']/r['predicted']:10.3f}")
PY
