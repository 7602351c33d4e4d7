#!/usr/bin/env bash
# The quickstart's GRPO stage: online RL on the task after scripts/quickstart.sh's pretraining
# (runs/quickstart/pretrain/model must exist).
#   1. a short supervised LoRA stage (recipes/quickstart/lora.yaml cut to WARMUP_STEPS steps):
#      the model learns the answer's words but not yet to tell the cases apart;
#   2. the task's held-out exact-match accuracy before GRPO;
#   3. GRPO (recipes/quickstart/grpo.yaml) trains that adapter further from the exact-match
#      reward of completions it samples itself;
#   4. the accuracy after, the reward per step, and how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=./build/bin/ctune
RUN=runs/quickstart
WARMUP_STEPS=${WARMUP_STEPS:-70}
[ -f "$RUN/pretrain/model/config.json" ] || { echo "run scripts/quickstart.sh first (no $RUN/pretrain/model)" >&2; exit 1; }
[ -x "$CTUNE" ] || CTUNE_TARGETS=ctune bash scripts/build.sh build

echo "== warm-up: $WARMUP_STEPS supervised LoRA steps"
START=$(date +%s)
$CTUNE train recipes/quickstart/lora.yaml output_dir="$RUN/grpo-warmup" training.max_steps="$WARMUP_STEPS" \
  training.eval_every=0 --overwrite
WARMUP_S=$(( $(date +%s) - START ))
BEFORE=$($CTUNE eval recipes/quickstart/lora.yaml --adapter "$RUN/grpo-warmup/adapter" --accuracy --json)

echo "== GRPO"
START=$(date +%s)
$CTUNE train recipes/quickstart/grpo.yaml --overwrite
GRPO_S=$(( $(date +%s) - START ))
echo "== after GRPO"
$CTUNE eval recipes/quickstart/lora.yaml --adapter "$RUN/grpo/adapter" --accuracy --show 4
AFTER=$($CTUNE eval recipes/quickstart/lora.yaml --adapter "$RUN/grpo/adapter" --accuracy --json)

/usr/bin/python3 - "$BEFORE" "$AFTER" "$RUN/grpo/metrics.jsonl" "$WARMUP_S" "$GRPO_S" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
steps = [json.loads(l) for l in open(sys.argv[3]) if '"reward"' in l]
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
first, last = steps[:5], steps[-5:]
print("\n== GRPO summary")
print(f"{'':44}{'before':>10}{'after':>10}")
print(f"{'held-out exact-match accuracy (greedy)':44}{100 * before['accuracy']:>9.1f}%{100 * after['accuracy']:>9.1f}%")
print(f"{'mean reward (first / last 5 steps, sampled)':44}{mean([s['reward'] for s in first]):>10.3f}{mean([s['reward'] for s in last]):>10.3f}")
gen = sum(s["time/generation_s"] for s in steps)
print(f"wall time: warm-up {sys.argv[4]} s, GRPO {sys.argv[5]} s ({len(steps)} steps, {gen:.0f} s of it generating)")
PY
