#!/usr/bin/env bash
# Fixture step: trains a small SentencePiece BPE model (vocab 1000, Llama-2 settings: identity
# normalisation, no whitespace folding, split digits, byte fallback) on the tokenizer corpus,
# for the GGUF export tests of `tokenizer.model` vocabularies. One thread, deterministic; skipped
# when the model is newer than the corpus.
#   make_spm_model.sh SPM_TRAIN CORPUS OUT_DIR   ->   OUT_DIR/tokenizer.model
set -euo pipefail
spm_train=${1:?usage: make_spm_model.sh SPM_TRAIN CORPUS OUT_DIR}
corpus=${2:?}
out=${3:?}
if [[ -f "$out/tokenizer.model" && "$out/tokenizer.model" -nt "$corpus" ]]; then
  exit 0
fi
mkdir -p "$out"
"$spm_train" --input="$corpus" --model_prefix="$out/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --split_digits=true --allow_whitespace_only_pieces=true --num_threads=1 --minloglevel=2
rm -f "$out/tokenizer.vocab"
echo "trained $out/tokenizer.model"
