#!/usr/bin/env bash
# Issue 32's speed check: generation inside a GRPO step against `ctune generate` on the same batch.
# Both sides sample 16 quickstart prompts x 8 completions (one batch of 128, temperature 1, no top-k,
# at most 10 new tokens, plain chat format) from the quickstart's pretrained base: GRPO with a
# fresh LoRA (B = 0, so its policy is the base) over a dataset of just those 16 prompts, so every
# step generates that batch; `ctune generate` with the same 128 prompts repeated, one batch each.
#   figure   completion tokens (the stop token included, as GRPO trains it) per second of the
#            whole generation call: GRPO's time/generation_tokens_per_s; for generate, the same
#            count over its batch's prefill_s + decode_s (--json)
#   warm     the first batch of each side pays first-call costs (fresh pages, thread start):
#            only batches 2..4 (steps 2..4) count, their median per run
# Sides alternate and swap order each rep; read the ratio (the goal: GRPO >= 0.9 x generate).
#   bash scripts/bench_grpo_generation.sh          # REPS=3; after scripts/quickstart.sh
# Also OUT (default /tmp/ctune-bench-grpo-generation), CTUNE (the binary). Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
PY=/usr/bin/python3
OUT=${OUT:-/tmp/ctune-bench-grpo-generation}
REPS=${REPS:-3}
MODEL=runs/quickstart/pretrain/model
[[ -f $MODEL/config.json ]] || { echo "bench_grpo_generation: $MODEL is missing: run bash scripts/quickstart.sh first" >&2; exit 1; }
mkdir -p "$OUT"
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open("recipes/quickstart/data/grpo_train.jsonl")][:16]
with open(out + "/prompts.jsonl", "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")
with open(out + "/generate.jsonl", "w") as f:
    for batch in range(4):
        for r in rows:
            for g in range(8): f.write(json.dumps({"prompt": r["prompt"][0]["content"]}) + "\n")
PY

grpo() {  # $1: rep; prints the warm steps' median tokens/s
  rm -rf "$OUT/grpo-$1"
  $CTUNE train recipes/quickstart/grpo.yaml output_dir="$OUT/grpo-$1" data.train="$OUT/prompts.jsonl" peft.init_from=null \
    training.max_steps=4 logging.every_n_steps=1 logging.samples_every_n_steps=0 >"$OUT/grpo-$1.log" 2>&1
  $PY - "$OUT/grpo-$1/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
print(statistics.median(j["time/generation_tokens_per_s"] for j in steps if "loss" in j and j["step"] >= 2))
PY
}
generate() {  # $1: rep
  $CTUNE generate --model "$MODEL" --prompt-file "$OUT/generate.jsonl" --chat --chat-format plain --temperature 1 --top-k 0 \
    --max-new-tokens 10 --batch-size 128 --seed 1 --json >"$OUT/generate-$1.jsonl" 2>"$OUT/generate-$1.log"
  $PY - "$OUT/generate-$1.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rates = []
for b in range(1, len(rows) // 128):
    rs = rows[b * 128:(b + 1) * 128]
    completion = sum(len(r["generated_ids"]) + (r["stop_reason"] == "eos") for r in rs)
    rates.append(completion / (rs[0]["prefill_s"] + rs[0]["decode_s"]))
print(statistics.median(rates))
PY
}

ratios=()
for rep in $(seq 1 "$REPS"); do
  if (( rep % 2 )); then g=$(grpo "$rep"); e=$(generate "$rep"); else e=$(generate "$rep"); g=$(grpo "$rep"); fi
  r=$($PY -c "print(f'{$g / $e:.3f}')")
  ratios+=("$r")
  printf 'rep %d  GRPO generation %7.1f tok/s  ctune generate %7.1f tok/s  ratio %s\n' "$rep" "$g" "$e" "$r"
done
printf 'median ratio (GRPO / generate) over %d reps: %s\n' "$REPS" "$($PY -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}")"
