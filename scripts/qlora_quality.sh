#!/usr/bin/env bash
# Quality of quantised bases on the quickstart task: the quickstart's LoRA stage trained over the
# same pretrained base held in bf16, int8 (LLM.int8) and nf4 (double-quantised), everything else
# equal, and the held-out eval loss and accuracy of each. Not part of the test run (minutes).
#   bash scripts/qlora_quality.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
BASE=runs/quickstart/pretrain/model
if [[ ! -f $BASE/config.json ]]; then
  $CTUNE init --config recipes/models/tiny-llama.json --out runs/quickstart/base --tokenizer byte --seed 0 --dtype fp32
  $CTUNE train recipes/quickstart/pretrain.yaml --overwrite
fi
OUT=runs/qlora-quality
mkdir -p "$OUT"
: >"$OUT/results.txt"
for base in bf16 int8 nf4; do
  quant=none
  [[ $base == bf16 ]] || quant=$base
  $CTUNE train recipes/quickstart/lora.yaml output_dir="$OUT/$base" precision=bf16 memory.quantize_base=$quant --overwrite \
    >"$OUT/$base.log" 2>&1
  result=$($CTUNE eval recipes/quickstart/lora.yaml --adapter "$OUT/$base/adapter" --accuracy --json)
  trained=$(grep eval_loss "$OUT/$base/metrics.jsonl" | tail -1)
  echo "$base $result $trained" >>"$OUT/results.txt"
  echo "done: $base" >&2
done
/usr/bin/python3 - "$OUT/results.txt" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    name, rest = line.split(" ", 1)
    fp32_eval, trained = rest.rsplit(" {", 1)
    rows[name] = (json.loads("{" + trained)["eval_loss"], json.loads(fp32_eval))
ref, ref32 = rows["bf16"][0], rows["bf16"][1]["eval_loss"]
print("\n== LoRA on the quickstart task over a quantised base (precision bf16)")
print("   eval loss as trained: over the quantised base, bf16 matmuls (the run's last evaluation)")
print("   eval loss fp32: the adapter over the unquantised base in fp32 (ctune eval --adapter)")
print(f"{'base':8}{'eval loss':>12}{'vs bf16':>10}{'eval fp32':>12}{'vs bf16':>10}{'accuracy':>10}")
for name, (trained, e) in rows.items():
    print(f"{name:8}{trained:12.4f}{100 * (trained / ref - 1):+9.1f}%{e['eval_loss']:12.4f}{100 * (e['eval_loss'] / ref32 - 1):+9.1f}%"
          f"{100 * e['accuracy']:9.1f}%")
PY
