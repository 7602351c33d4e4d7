#!/usr/bin/env bash
# The quickstart's distillation stage: on-policy distillation (objective.name: distill, TRL's
# GKD) after the LoRA stage of scripts/quickstart.sh, which must have run (runs/quickstart/lora).
#   1. merge the LoRA stage into the pretrained model: runs/quickstart/sft, the teacher;
#   2. a smaller random model with the same tokenizer (recipes/models/tiny-llama-student.json,
#      a quarter of the teacher's width and half its depth): the student;
#   3. the task's held-out exact-match accuracy of both before;
#   4. distillation (recipes/quickstart/distill.yaml): half of the micro-batches the student's
#      own answers scored against the teacher's distribution token by token, half the data's;
#   5. the student's accuracy after.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
CTUNE=./build/bin/ctune
RUN=runs/quickstart
[ -f "$RUN/lora/adapter/adapter_config.json" ] || { echo "run scripts/quickstart.sh first (no $RUN/lora/adapter)" >&2; exit 1; }
[ -x "$CTUNE" ] || CTUNE_TARGETS=ctune bash scripts/build.sh build

echo "== the teacher: the LoRA stage merged into the pretrained model"
$CTUNE merge --base "$RUN/pretrain/model" --adapter "$RUN/lora/adapter" --out "$RUN/sft" --overwrite
echo "== the student: a smaller random model"
rm -rf "$RUN/student"
$CTUNE init --config recipes/models/tiny-llama-student.json --out "$RUN/student" --tokenizer byte --seed 1 --dtype fp32

accuracy() { $CTUNE eval recipes/quickstart/lora.yaml --model "$1" peft.method=none --accuracy --json; }
TEACHER=$(accuracy "$RUN/sft")
BEFORE=$(accuracy "$RUN/student")
rm -rf "$RUN/distill"
$CTUNE train recipes/quickstart/distill.yaml
echo "== after distillation"
$CTUNE eval recipes/quickstart/lora.yaml --model "$RUN/distill/model" peft.method=none --accuracy --show 5
AFTER=$(accuracy "$RUN/distill/model")

/usr/bin/python3 - "$TEACHER" "$BEFORE" "$AFTER" "$(( $(date +%s) - START ))" <<'PY'
import json, sys
teacher, before, after = (json.loads(x) for x in sys.argv[1:4])
print("\n== distillation summary (the task's 200 held-out sentences)")
print(f"{'':40}{'teacher':>10}{'student before':>16}{'student after':>15}")
print(f"{'exact-match accuracy':40}{100 * teacher['accuracy']:>9.1f}%{100 * before['accuracy']:>15.1f}%{100 * after['accuracy']:>14.1f}%")
print(f"{'answer loss (nats/token)':40}{teacher['eval_loss']:>10.4f}{before['eval_loss']:>16.4f}{after['eval_loss']:>15.4f}")
print(f"wall time {sys.argv[4]} s")
PY
