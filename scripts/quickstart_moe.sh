#!/usr/bin/env bash
# The quickstart on a mixture of experts, offline, after the build (scripts/quickstart.sh builds):
#   1. a random Qwen3-MoE of the quickstart Llama's size (recipes/models/qwen3-moe-quickstart.json:
#      hidden 256, 4 layers, 8 experts of 344, 2 routed per token; byte-level tokenizer), or
#      with CONFIG=recipes/models/mixtral-quickstart.json a Mixtral of the same size (its experts'
#      adapters on w1/w3/w2, Mixtral's names for gate/up/down);
#   2. pretraining on the bundled stories (recipes/quickstart/pretrain.yaml, its model and output
#      moved to runs/quickstart-moe);
#   3. LoRA on the task, adapters on the attention and every expert (recipes/quickstart/moe-lora.yaml);
#   4. held-out metrics before and after each stage, the expert load of the last step, and the
#      memory the ledger predicted against the measured peak.
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=./build/bin/ctune
CONFIG=${CONFIG:-recipes/models/qwen3-moe-quickstart.json}
RUN=runs/quickstart-moe
LORA=(recipes/quickstart/moe-lora.yaml)
if grep -q '"mixtral"' "$CONFIG"; then
  RUN=runs/quickstart-mixtral
  LORA+=("peft.target_modules=[q_proj,k_proj,v_proj,o_proj,w1,w3,w2]")
fi
LORA+=(model.path="$RUN/pretrain/model" output_dir="$RUN/lora")
[ -x "$CTUNE" ] || CTUNE_TARGETS=ctune bash scripts/build.sh build
rm -rf "$RUN"
START=$(date +%s)

echo "== random base model with experts"
$CTUNE init --config "$CONFIG" --out "$RUN/base" --tokenizer byte --seed 0 --dtype fp32

echo "== stage 1: pretraining on the bundled stories"
PRE=(recipes/quickstart/pretrain.yaml model.path="$RUN/base" output_dir="$RUN/pretrain")
PRE_BEFORE=$($CTUNE eval "${PRE[@]}" --json)
$CTUNE train "${PRE[@]}"
PRE_AFTER=$($CTUNE eval "${PRE[@]}" --model "$RUN/pretrain/model" --json)

echo "== stage 2: LoRA on the task, adapters on every expert"
TASK_BEFORE=$($CTUNE eval "${LORA[@]}" --accuracy --json)
$CTUNE train "${LORA[@]}"
$CTUNE eval "${LORA[@]}" --adapter "$RUN/lora/adapter" --accuracy --show 3
TASK_AFTER=$($CTUNE eval "${LORA[@]}" --adapter "$RUN/lora/adapter" --accuracy --json)

/usr/bin/python3 - "$PRE_BEFORE" "$PRE_AFTER" "$TASK_BEFORE" "$TASK_AFTER" "$RUN/lora/metrics.jsonl" "$(( $(date +%s) - START ))" <<'PY'
import json, sys
pb, pa, tb, ta = (json.loads(x) for x in sys.argv[1:5])
records = [json.loads(l) for l in open(sys.argv[5])]
steps = [r for r in records if "loss" in r and "step" in r]
memory = next(r["memory"] for r in records if "memory" in r)
print("\n== quickstart on a mixture of experts (held-out data)")
print(f"{'':34}{'before':>10}{'after':>10}")
print(f"{'pretraining: eval loss':34}{pb['eval_loss']:>10.4f}{pa['eval_loss']:>10.4f}")
print(f"{'LoRA task: eval loss':34}{tb['eval_loss']:>10.4f}{ta['eval_loss']:>10.4f}")
print(f"{'LoRA task: exact-match accuracy':34}{100 * tb['accuracy']:>9.1f}%{100 * ta['accuracy']:>9.1f}%")
last = steps[-1]
if "expert_load" in last:
    print("expert load at the last step (share of routed tokens per expert; 0.125 is balanced):")
    for layer, shares in last["expert_load"].items():
        print(f"  layer {layer}: " + " ".join(f"{x:.3f}" for x in shares))
if "aux_loss" in last:
    print(f"load-balancing loss at the last step: {last['aux_loss']:.4f} (1.0 when balanced)")
print(f"LoRA stage memory: predicted {memory['peak_bytes'] / 1e6:.1f} MB, measured {memory['measured_peak_bytes'] / 1e6:.1f} MB")
print(f"wall time {sys.argv[6]} s")
PY
