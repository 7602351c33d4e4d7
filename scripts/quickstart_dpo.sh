#!/usr/bin/env bash
# The quickstart's third stage: preference tuning (DPO; STAGE=kto for KTO on the same pairs
# unpaired, as scripts/quickstart_kto.sh runs it) after the LoRA stage of scripts/quickstart.sh,
# which must have run (runs/quickstart/lora/adapter).
#   1. merge the LoRA stage into the pretrained model: runs/quickstart/sft, the DPO policy's
#      starting point and (adapters off) its reference;
#   2. held-out preference metrics and the task's exact-match accuracy before;
#   3. DPO with LoRA (recipes/quickstart/dpo.yaml; or kto.yaml);
#   4. the same metrics after, the adapter scored as a DPO policy on the held-out pairs: the
#      preference accuracy (chosen reward > rejected reward) should rise, the task accuracy should
#      not collapse.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
CTUNE=./build/bin/ctune
RUN=runs/quickstart
STAGE=${STAGE:-dpo}
[ "$STAGE" = dpo ] || [ "$STAGE" = kto ] || { echo "STAGE: expected dpo or kto, found $STAGE" >&2; exit 1; }
[ -f "$RUN/lora/adapter/adapter_config.json" ] || { echo "run scripts/quickstart.sh first (no $RUN/lora/adapter)" >&2; exit 1; }
[ -x "$CTUNE" ] || CTUNE_TARGETS=ctune bash scripts/build.sh build

echo "== the LoRA stage merged into the pretrained model"
$CTUNE merge --base "$RUN/pretrain/model" --adapter "$RUN/lora/adapter" --out "$RUN/sft" --overwrite

echo "== before ${STAGE^^}"
PREF_BEFORE=$($CTUNE eval recipes/quickstart/dpo.yaml --json)
TASK_BEFORE=$($CTUNE eval recipes/quickstart/lora.yaml --model "$RUN/sft" peft.method=none --accuracy --json)
rm -rf "${RUN:?}/$STAGE"
$CTUNE train "recipes/quickstart/$STAGE.yaml"
echo "== after ${STAGE^^}"
PREF_AFTER=$($CTUNE eval recipes/quickstart/dpo.yaml --adapter "$RUN/$STAGE/adapter" --json)
TASK_AFTER=$($CTUNE eval recipes/quickstart/lora.yaml --model "$RUN/sft" --adapter "$RUN/$STAGE/adapter" --accuracy --json)

/usr/bin/python3 - "$PREF_BEFORE" "$PREF_AFTER" "$TASK_BEFORE" "$TASK_AFTER" "$(( $(date +%s) - START ))" "${STAGE^^}" <<'PY'
import json, sys
pb, pa, tb, ta = (json.loads(x) for x in sys.argv[1:5])
stage = sys.argv[6]
print(f"\n== {stage} summary (held-out pairs and sentences; the adapter scored as a DPO policy)")
print(f"{'':44}{'before':>10}{'after':>10}")
def row(name, b, a, pct=False):
    f = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.4f}")
    print(f"{name:44}{f(b):>10}{f(a):>10}")
row("DPO loss (sigmoid)", pb["eval_loss"], pa["eval_loss"])
row("preference accuracy (chosen reward > rejected)", pb["eval_rewards/accuracies"], pa["eval_rewards/accuracies"], pct=True)
row("reward margin (beta x log-ratio, nats)", pb["eval_rewards/margins"], pa["eval_rewards/margins"])
row("log p(chosen)", pb["eval_logps/chosen"], pa["eval_logps/chosen"])
row("log p(rejected)", pb["eval_logps/rejected"], pa["eval_logps/rejected"])
row("task exact-match accuracy", tb["accuracy"], ta["accuracy"], pct=True)
print(f"(before {stage} the policy is its reference: every reward is 0, a tie, which TRL's accuracy counts as a miss)")
print(f"wall time {sys.argv[5]} s")
PY
