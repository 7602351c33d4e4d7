#!/usr/bin/env bash
# A whole LoRA journey on a tiny model, each step verified, from a fresh clone:
#   1. build ctune; create a tiny random Llama (byte tokenizer) with `ctune init`;
#   2. LoRA-train it on the bundled quickstart task, uninterrupted: the reference run;
#   3. the same run again, killed with SIGKILL in the middle of a step (CTUNE_KILL_AT);
#   4. `ctune train --resume` finishes it: metrics and adapter must be bit-identical to step 2;
#   5. `ctune merge`: the merged model scores like base + adapter;
#   6. `ctune export --format gguf` (merged model) and `--format gguf-lora` (adapter + base GGUF);
#   7. llama.cpp (node-llama-cpp, when its test cache is present) loads both: its greedy
#      continuation and next-token probabilities must match ctune's.
# Every step prints one PASS/FAIL line; the script exits non-zero at the first failure.
# About two minutes on 2 cores after the build. Not part of the CI test run.
#   CTUNE_BUILD_DIR   build directory (default build)
#   CTUNE_SKIP_INSTALL=1  do not run scripts/install-deps.sh
#   CTUNE_LLAMA_CPP_NPM_CACHE  node-llama-cpp cache (default: the test suite's, in the build dir)
#   CTUNE_JOURNEY_FAMILY  the tiny model's model_type: llama (default), mistral, qwen2, qwen3,
#                         smollm3, gemma2, gemma3_text, phi3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CTUNE_BUILD_DIR:-build}
FAMILY=${CTUNE_JOURNEY_FAMILY:-llama}
RUN=${CTUNE_JOURNEY_DIR:-runs/lora-journey-$FAMILY}
PY=/usr/bin/python3
START=$(date +%s)

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1" >&2; exit 1; }

[[ ${CTUNE_SKIP_INSTALL:-0} == 1 ]] || bash scripts/install-deps.sh
CTUNE_TARGETS=ctune bash scripts/build.sh "$BUILD"
CTUNE=$BUILD/bin/ctune
[[ -x $CTUNE ]] || fail "build: $CTUNE missing"
pass "build: $CTUNE"
rm -rf "$RUN"
mkdir -p "$RUN"

# --- 1. tiny base model --------------------------------------------------------------------
# Gemma's queries scale by query_pre_attn_scalar^-1/2; llama.cpp's by head_dim^-1/2.
EXTRA=""
[[ $FAMILY == gemma* ]] && EXTRA='"query_pre_attn_scalar": 16,'
cat > "$RUN/config.json" <<EOF
{"model_type": "$FAMILY", $EXTRA "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "initializer_range": 0.1, "bos_token_id": 256, "eos_token_id": 257,
 "torch_dtype": "float32"}
EOF
$CTUNE init --config "$RUN/config.json" --out "$RUN/base" --tokenizer byte --seed 7 --dtype fp32 > "$RUN/init.log" \
  || fail "init: see $RUN/init.log"
pass "init: tiny random $FAMILY model in $RUN/base"

# --- 2. the uninterrupted reference run ----------------------------------------------------
cat > "$RUN/lora.yaml" <<EOF
output_dir: $RUN/killed
seed: 3
threads: auto
model: {path: $RUN/base, dtype: fp32}
data:
  train: recipes/quickstart/data/task_train.jsonl
  eval: recipes/quickstart/data/task_eval.jsonl
  format: instruct
  instruct_template: chat
  chat_format: plain
  train_on_input: false
  max_seq_len: 128
peft: {method: lora, rank: 8, alpha: 16, dropout: 0.05,
       target_modules: [all-linear]}
optimizer: {name: adamw, lr: 1.0e-2}
scheduler: {name: cosine, warmup_steps: 3}
training: {batch_size: 16, grad_accum: 1, max_steps: 40, eval_every: 20}
checkpoint: {every_n_steps: 8, keep_last: 2}
logging: {every_n_steps: 10}
EOF
$CTUNE train "$RUN/lora.yaml" output_dir="$RUN/reference" > "$RUN/reference.log" 2>&1 \
  || fail "reference run: see $RUN/reference.log"
[[ -f $RUN/reference/adapter/adapter_model.safetensors ]] || fail "reference run: no adapter written"
$PY - "$RUN/reference/metrics.jsonl" <<'PY' || fail "reference run: the training loss did not go down"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-5:]) / 5
print(f"  loss {first:.4f} at step 1 -> {last:.4f} (mean of the last 5 of {len(steps)} steps)")
sys.exit(0 if last < first else 1)
PY
pass "reference run: 40 LoRA steps, adapter in $RUN/reference/adapter"

# --- 3. killed in the middle of step 22 ------------------------------------------------------
set +e
# In a subshell whose stderr is dropped: the shell's own "Killed" notice is expected here.
(CTUNE_KILL_AT=step:22:mid $CTUNE train "$RUN/lora.yaml" > "$RUN/killed.log" 2>&1; exit $?) 2>/dev/null
status=$?
set -e
[[ $status -eq 137 ]] || fail "kill: expected death by SIGKILL (status 137), got $status; see $RUN/killed.log"
[[ -d $RUN/killed/checkpoints/step_00000016 ]] || fail "kill: no step-16 checkpoint before the kill"
[[ ! -e $RUN/killed/adapter ]] || fail "kill: a final adapter exists although the run died"
pass "kill: SIGKILL inside step 22, newest checkpoint step 16"

# --- 4. resumed to the end: bit-identical to the reference -----------------------------------
$CTUNE train "$RUN/lora.yaml" --resume > "$RUN/resumed.log" 2>&1 || fail "resume: see $RUN/resumed.log"
grep -q "resumed from" "$RUN/resumed.log" || fail "resume: the run did not say where it resumed from"
$PY - "$RUN/reference/metrics.jsonl" "$RUN/killed/metrics.jsonl" <<'PY' || fail "resume: loss trajectory differs"
import json, sys
def losses(path):  # the exact text of each step's training and eval loss
    out = []
    for line in open(path):
        j = json.loads(line)
        for key in ("loss", "eval_loss"):
            if key in j:
                out.append((j["step"], key, json.dumps(j[key])))
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print(f"  {len(a)} loss values in the reference, {len(b)} in the killed-and-resumed run")
sys.exit(0 if a == b and a else 1)
PY
cmp -s "$RUN/reference/adapter/adapter_model.safetensors" "$RUN/killed/adapter/adapter_model.safetensors" \
  || fail "resume: the adapter differs from the reference's"
pass "resume: metrics.jsonl losses and adapter_model.safetensors bit-identical to the uninterrupted run"
ADAPTER=$RUN/killed/adapter

# --- 5. merge ----------------------------------------------------------------------------------
$CTUNE merge --base "$RUN/base" --adapter "$ADAPTER" --out "$RUN/merged" --dtype fp32 > "$RUN/merge.log" 2>&1 \
  || fail "merge: see $RUN/merge.log"
PROBE="Who is in this sentence? Jack fed the ducks by the river."
$CTUNE score --model "$RUN/base" --adapter "$ADAPTER" --text "$PROBE" --json > "$RUN/score_adapter.json"
$CTUNE score --model "$RUN/merged" --text "$PROBE" --json > "$RUN/score_merged.json"
$CTUNE score --model "$RUN/base" --text "$PROBE" --json > "$RUN/score_base.json"
$PY - "$RUN" <<'PY' || fail "merge: merged model does not score like base + adapter"
import json, sys
d = sys.argv[1]
a, m, b = (json.load(open(f"{d}/score_{n}.json"))["nll"] for n in ("adapter", "merged", "base"))
diff = max(abs(x - y) for x, y in zip(a, m))
moved = max(abs(x - y) for x, y in zip(a, b))
print(f"  max |dNLL| merged vs base+adapter {diff:.2e} (limit 1e-5); the adapter itself moves NLLs by {moved:.3f}")
sys.exit(0 if diff <= 1e-5 and moved > 1e-3 else 1)
PY
pass "merge: $RUN/merged scores like base + adapter"

# --- 6. GGUF exports -------------------------------------------------------------------------
export_gguf() {  # name, then the export arguments
  local name=$1
  shift
  $CTUNE export "$@" > "$RUN/export-$name.log" 2>&1 || fail "export $name: see $RUN/export-$name.log"
  grep -q "^self-check: max |dNLL|" "$RUN/export-$name.log" || fail "export $name: no self-check line"
  sed 's/^/  /' "$RUN/export-$name.log" | grep -E "wrote|self-check|rounding"
  pass "export $name"
}
export_gguf merged --model "$RUN/merged" --format gguf --out "$RUN/merged.f32.gguf"
export_gguf merged-q8_0 --model "$RUN/merged" --format gguf --type q8_0 --out "$RUN/merged.q8_0.gguf"
export_gguf base --model "$RUN/base" --format gguf --out "$RUN/base.f32.gguf"
export_gguf lora --model "$RUN/base" --adapter "$ADAPTER" --format gguf-lora --out "$RUN/adapter.gguf"

# --- 7. llama.cpp loads them and computes the same model ----------------------------------------
NPM=${CTUNE_LLAMA_CPP_NPM_CACHE:-$BUILD/test-data/export/node-llama-cpp}
if [[ ! -d $NPM/node_modules/node-llama-cpp ]]; then
  echo "SKIP llama.cpp reload: no node-llama-cpp in $NPM (run: bash tests/export/fetch_llama_cpp.sh $NPM)"
  echo "journey done in $(( $(date +%s) - START )) s (llama.cpp part skipped)"
  exit 0
fi
PROMPT_IDS=$($CTUNE tokenize --tokenizer "$RUN/base" --text "User: Who is in this sentence? Mia hugged her dog." --json)
$PY - "$RUN" "$PROMPT_IDS" <<'PY'
import json, sys
d, prompt = sys.argv[1], json.loads(sys.argv[2])
job = lambda name, model, lora=None: {"name": name, "model": f"{d}/{model}", "lora": lora and f"{d}/{lora}",
                                      "prompt": prompt, "generate": 32, "top": 0, "texts": []}
json.dump({"cases": [job("merged", "merged.f32.gguf"), job("base+lora", "base.f32.gguf", "adapter.gguf")]},
          open(f"{d}/llama_cpp_jobs.json", "w"))
PY
node tests/export/llama_cpp_eval.mjs "$NPM" "$RUN/llama_cpp_jobs.json" "$RUN/llama_cpp_results.json" \
  || fail "llama.cpp: llama_cpp_eval.mjs failed"
check_llama_cpp() {  # case name, then `ctune score` model arguments
  local name=$1
  shift
  local ids
  ids=$($PY -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][sys.argv[2]]
if "error" in r: sys.exit("llama.cpp: " + r["error"])
print(",".join(map(str, json.loads(sys.argv[3]) + r["greedy"])))' "$RUN/llama_cpp_results.json" "$name" "$PROMPT_IDS") \
    || fail "llama.cpp $name: no result"
  $CTUNE score "$@" --ids "$ids" --json > "$RUN/score_llama_cpp_$name.json"
  $PY - "$RUN/llama_cpp_results.json" "$name" "$RUN/score_llama_cpp_$name.json" "$PROMPT_IDS" <<'PY' \
    || fail "llama.cpp $name: differs from ctune"
import json, math, sys
r = json.load(open(sys.argv[1]))["results"][sys.argv[2]]
s = json.load(open(sys.argv[3]))
P, greedy = len(json.loads(sys.argv[4])), r["greedy"]
# ctune's greedy choice after each prefix, and its probability of llama.cpp's token there.
ours = s["argmax"][P - 1:P - 1 + len(greedy)]
same = next((k for k, (a, b) in enumerate(zip(ours, greedy)) if a != b), len(greedy))
dp = max(abs(dict(map(tuple, r["probs"][k]))[t] - math.exp(-s["nll"][P - 1 + k])) for k, t in enumerate(greedy))
print(f"  greedy {same}/{len(greedy)} tokens equal, max |dp| of the chosen tokens {dp:.2e} (limit 1e-3)")
sys.exit(0 if same == len(greedy) and len(greedy) >= 32 and dp <= 1e-3 else 1)
PY
  pass "llama.cpp $name: same greedy continuation and probabilities as ctune"
}
check_llama_cpp merged --model "$RUN/merged"
check_llama_cpp base+lora --model "$RUN/base" --adapter "$ADAPTER"
echo "journey done in $(( $(date +%s) - START )) s"
