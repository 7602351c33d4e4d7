#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: install what ctune needs, build it,
# create a small random Llama checkpoint (recipes/models/tiny-llama.json, byte-level tokenizer)
# and score a text with it. Nothing is downloaded from a model hub.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
CTUNE_TARGETS=ctune bash scripts/build.sh build
CTUNE=./build/bin/ctune
OUT=${1:-runs/quickstart}
$CTUNE init --config recipes/models/tiny-llama.json --out "$OUT" --tokenizer byte --seed 0 --overwrite
$CTUNE info "$OUT"
$CTUNE score --model "$OUT" --text "ctune scores every token of this sentence."
