#!/usr/bin/env bash
# Every model family through the training switches, on a tiny random model of each (4 layers,
# hidden 64, byte tokenizer: SmolLM3's 4th layer is NoPE; Gemma with query_pre_attn_scalar and a
# window of 16, shorter than the rows; Phi-3 with half the head rotary): four steps per cell, one PASS/FAIL line per cell with the
# last loss, then beam-search generation with the trained adapter and `ctune consolidate` of a
# sharded checkpoint. The cells are the switches a family could break: QLoRA nf4 and int8, rsLoRA
# in fp16, full fine-tuning with full activation checkpointing, LoRA bf16 with selective
# checkpointing, and on two ranks full_shard with CPU offload (sharded checkpoints),
# shard_grad_op (full fine-tuning) and hybrid_shard. Exits non-zero when a cell fails.
# Qwen3-MoE and Mixtral with 8 experts, 2 per token (Qwen3-MoE's first layer dense).
# A few minutes on 2 cores after the build; not part of the CI test run.
#   FAMILIES='gemma2 phi3' bash scripts/family_matrix.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${CTUNE_BUILD_DIR:-build}
FAMILIES=${FAMILIES:-llama qwen3 gemma2 gemma3_text phi3 smollm3 qwen3_moe mixtral}
OUT=${OUT:-runs/family-matrix}
[[ -x $BUILD/bin/ctune ]] || CTUNE_TARGETS=ctune bash scripts/build.sh "$BUILD"
CTUNE=$BUILD/bin/ctune
mkdir -p "$OUT"
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; failed=1; }

last_loss() { /usr/bin/python3 -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l][-1])" "$1"; }

for family in $FAMILIES; do
  dir=$OUT/$family
  rm -rf "$dir" && mkdir -p "$dir"
  extra=""
  [[ $family == gemma* ]] && extra='"query_pre_attn_scalar": 16, "sliding_window": 16,'
  [[ $family == phi3 ]] && extra='"partial_rotary_factor": 0.5,'
  # Experts: 8 of 32 (2 per token) on every layer but Qwen3-MoE's first (a dense one).
  [[ $family == qwen3_moe ]] && extra='"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true, "mlp_only_layers": [0],'
  [[ $family == mixtral ]] && extra='"num_local_experts": 8, "num_experts_per_tok": 2,'
  cat >"$dir/config.json" <<EOF
{"model_type": "$family", $extra "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "initializer_range": 0.1, "bos_token_id": 256, "eos_token_id": 257,
 "torch_dtype": "float32"}
EOF
  if ! $CTUNE init --config "$dir/config.json" --out "$dir/base" --tokenizer byte --seed 7 --dtype fp32 >"$dir/init.log" 2>&1; then
    fail "$family init: $(tail -1 "$dir/init.log")"
    continue
  fi
  cat >"$dir/lora.yaml" <<EOF
output_dir: $dir/run
seed: 3
threads: 1
model: {path: $dir/base, dtype: fp32}
data: {train: recipes/quickstart/data/task_train.jsonl, format: instruct, instruct_template: chat, chat_format: plain, max_seq_len: 128}
peft: {method: lora, rank: 8, alpha: 16, target_modules: [all-linear]}
optimizer: {name: adamw, lr: 1.0e-2}
scheduler: {name: cosine, warmup_steps: 1}
training: {batch_size: 8, grad_accum: 1, max_steps: 4, eval_every: 0}
checkpoint: {every_n_steps: 2, keep_last: 1}
logging: {every_n_steps: 1}
EOF
  while IFS='|' read -r name args; do
    run=$dir/${name// /-}
    # shellcheck disable=SC2086
    if $CTUNE train "$dir/lora.yaml" output_dir="$run" $args >"$run.log" 2>&1; then
      pass "$family | $name | loss $(last_loss "$run/metrics.jsonl")"
    else
      fail "$family | $name | $(tail -1 "$run.log")"
    fi
  done <<'CELLS'
qlora nf4 bf16|memory.quantize_base=nf4 precision=bf16
qlora int8|memory.quantize_base=int8
rslora fp16|peft.rslora=true precision=fp16
full fp32 checkpointing|peft.method=none memory.activation_checkpointing=full
lora bf16 selective|precision=bf16 memory.activation_checkpointing=selective
lora full_shard offload 2 ranks|--nproc 2 distributed.strategy=full_shard distributed.cpu_offload=true checkpoint.layout=sharded
full shard_grad_op 2 ranks|--nproc 2 peft.method=none distributed.strategy=shard_grad_op
lora hybrid_shard 2 ranks|--nproc 2 distributed.strategy=hybrid_shard
CELLS
  adapter=$dir/qlora-int8/adapter
  if [[ -d $adapter ]] && $CTUNE generate --model "$dir/base" --adapter "$adapter" --prompt "Once upon" --max-new-tokens 16 \
       --num-beams 3 >"$dir/beam.log" 2>&1; then
    pass "$family | beam search with the adapter"
  else
    fail "$family | beam search with the adapter | $(tail -1 "$dir/beam.log")"
  fi
  ckpt=$(ls -d "$dir"/lora-full_shard-offload-2-ranks/checkpoints/step_* 2>/dev/null | tail -1)
  if [[ -n $ckpt ]] && $CTUNE consolidate "$ckpt" --out "$dir/consolidated" --overwrite >"$dir/consolidate.log" 2>&1 &&
     [[ -f $dir/consolidated/adapter_model.safetensors ]]; then
    pass "$family | consolidate the sharded checkpoint"
  else
    fail "$family | consolidate the sharded checkpoint | $(tail -1 "$dir/consolidate.log" 2>/dev/null)"
  fi
done
exit $failed
