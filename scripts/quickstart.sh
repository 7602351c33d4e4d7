#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone, offline:
#   1. install what ctune needs and build it;
#   2. create a tiny random Llama (recipes/models/tiny-llama.json, byte-level tokenizer);
#   3. pretrain it on the bundled stories (recipes/quickstart/pretrain.yaml, full fine-tuning);
#   4. LoRA-fine-tune it on a task it cannot do (recipes/quickstart/lora.yaml);
#   5. print held-out metrics before and after each stage, and a few generations.
# The bundled data is made by scripts/make_quickstart_data.py (regenerating it gives the same bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
bash scripts/install-deps.sh
CTUNE_TARGETS=ctune bash scripts/build.sh build
CTUNE=./build/bin/ctune
RUN=runs/quickstart
rm -rf "$RUN"

echo "== random base model"
$CTUNE init --config recipes/models/tiny-llama.json --out "$RUN/base" --tokenizer byte --seed 0 --dtype fp32

echo "== stage 1: pretraining on the bundled stories"
PRE_BEFORE=$($CTUNE eval recipes/quickstart/pretrain.yaml --json)
$CTUNE train recipes/quickstart/pretrain.yaml
PRE_AFTER=$($CTUNE eval recipes/quickstart/pretrain.yaml --model "$RUN/pretrain/model" --json)

echo "== stage 2: LoRA on the task (before: the pretrained model as it is)"
$CTUNE eval recipes/quickstart/lora.yaml --accuracy --show 3
TASK_BEFORE=$($CTUNE eval recipes/quickstart/lora.yaml --accuracy --json)
$CTUNE train recipes/quickstart/lora.yaml
echo "== after LoRA"
$CTUNE eval recipes/quickstart/lora.yaml --adapter "$RUN/lora/adapter" --accuracy --show 5
TASK_AFTER=$($CTUNE eval recipes/quickstart/lora.yaml --adapter "$RUN/lora/adapter" --accuracy --json)

/usr/bin/python3 - "$PRE_BEFORE" "$PRE_AFTER" "$TASK_BEFORE" "$TASK_AFTER" "$(( $(date +%s) - START ))" <<'PY'
import json, sys
pb, pa, tb, ta = (json.loads(x) for x in sys.argv[1:5])
print("\n== quickstart summary (held-out data)")
print(f"{'':34}{'before':>10}{'after':>10}{'change':>10}")
def row(name, b, a, pct=False):
    f = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.4f}")
    change = f"{100 * (a - b) / b:+.0f}%" if b and not pct else ""
    print(f"{name:34}{f(b):>10}{f(a):>10}{change:>10}")
row("pretraining: eval loss (nats/token)", pb["eval_loss"], pa["eval_loss"])
row("LoRA task: eval loss", tb["eval_loss"], ta["eval_loss"])
row("LoRA task: exact-match accuracy", tb["accuracy"], ta["accuracy"], pct=True)
print(f"wall time {sys.argv[5]} s (install and build included)")
PY
