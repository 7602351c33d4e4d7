#!/usr/bin/env bash
# Fault drill: replays, against the real binary, the ways a careful but unlucky user (or a
# hostile file) can hurt a run, and prints one PASS/FAIL line per class. Not part of the tests
# (a few minutes; the tests carry the fast cases). Run from a build: bash scripts/fault_drill.sh
#
#   two writers, preemption at a random moment (SIGTERM) and resume, Ctrl-C twice, --overwrite
#   or --resume into directories that hold inputs or are not runs, resume onto another base via
#   a relative path from another directory, retention with a damaged checkpoint, merge/export
#   onto their inputs, a disk filling during merge (root only: tmpfs), stale staging leftovers,
#   JSON nested a million deep in every reader, a 10^8-byte dataset line, a damaged manifest,
#   `--resume key=value`, an fp16 run whose every step overflows; the --nproc store against a
#   stranger (and `ss -ltnp`), links planted at staging names and the lock, a merge whose weights
#   are inf/NaN, a sharded checkpoint without a rank's shard, consolidate onto the base, reports
#   of default runs and of hostile metrics, Ctrl-Z on the --nproc launcher; chat templates that
#   compare or hash lists of shared 30 MB strings, multiply a string past the output limit, or
#   write the answer around the prompt.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CTUNE=${CTUNE:-$ROOT/build/bin/ctune}
[ -x "$CTUNE" ] || bash scripts/build.sh build >/dev/null
W=$(mktemp -d /tmp/ctune-drill.XXXXXX)
trap 'rm -rf "$W"' EXIT
passed=0
failed=0

result() {  # result NAME STATUS(0 = pass) DETAIL
  if [ "$2" -eq 0 ]; then
    printf 'PASS  %-34s %s\n' "$1" "$3"
    passed=$((passed + 1))
  else
    printf 'FAIL  %-34s %s\n' "$1" "$3"
    failed=$((failed + 1))
  fi
}
ct() { "$CTUNE" --threads 2 "$@"; }
# The step/loss and eval lines of a run's metrics.jsonl (what a resumed run must reproduce).
trajectory() { /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "loss" in j: print(j["step"], j["loss"])
    elif "eval_loss" in j: print(j["step"], "eval", j["eval_loss"])' "$1"; }
one_line_error() {  # status file: exit 1 and a last stderr line starting "ctune: "
  [ "$1" -eq 1 ] && tail -n 1 "$2" | grep -q '^ctune: '
}

# A tiny model, its data and a recipe (~0.5 s of training per 20 steps).
cat >"$W/config.json" <<'EOF'
{"model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true, "torch_dtype": "float32"}
EOF
ct init --config "$W/config.json" --out "$W/model" --tokenizer byte >/dev/null 2>&1
ct init --config "$W/config.json" --out "$W/other-model" --tokenizer byte --seed 99 >/dev/null 2>&1
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
with open(f"{w}/train.jsonl", "w") as f:
    for i in range(200):
        f.write(json.dumps({"instruction": f"Add {i} and 3", "output": str(i + 3)}) + "\n")
with open(f"{w}/eval.jsonl", "w") as f:
    for i in range(8):
        f.write(json.dumps({"instruction": f"Add {i} and 5", "output": str(i + 5)}) + "\n")
EOF
recipe() {  # recipe FILE MODEL_PATH
  cat >"$1" <<EOF
output_dir: $W/run
model: {path: $2}
data: {train: $W/train.jsonl, eval: $W/eval.jsonl, format: instruct, instruct_template: chat, chat_format: plain, max_seq_len: 64}
peft: {method: lora, rank: 4, alpha: 8, dropout: 0.1, target_modules: [q_proj, v_proj]}
optimizer: {name: adamw, lr: 3.0e-3}
scheduler: {name: cosine, warmup_steps: 2}
training: {batch_size: 4, grad_accum: 2, max_steps: 400, eval_every: 50}
checkpoint: {every_n_steps: 0, keep_last: 2}
EOF
}
R=$W/recipe.yaml
recipe "$R" "$W/model"

# 1. Two writers: the second is refused while the first runs; the lock of a killed run is free.
"$CTUNE" --threads 2 train "$R" output_dir="$W/writers" >"$W/w1.log" 2>&1 &  # not through ct(): $! is ctune's pid
first=$!
for _ in $(seq 100); do [ -s "$W/writers/metrics.jsonl" ] && break; sleep 0.1; done
ct train "$R" output_dir="$W/writers" --overwrite >"$W/w2.log" 2>&1
s2=$?
kill -KILL $first 2>/dev/null
wait $first 2>/dev/null
ct train "$R" output_dir="$W/writers" --resume training.eval_every=50 >"$W/w3.log" 2>&1
s3=$?
one_line_error $s2 "$W/w2.log" && grep -q "in use by another ctune process (pid $first)" "$W/w2.log" && [ $s3 -eq 0 ]
result "two writers" $? "second refused: $(tail -n 1 "$W/w2.log" | cut -c1-80)...; after SIGKILL, resume took the lock"

# 2. SIGTERM at a random moment of a run with no periodic checkpoints, then --resume.
ct train "$R" output_dir="$W/reference" >/dev/null 2>&1
"$CTUNE" --threads 2 train "$R" output_dir="$W/preempted" >"$W/t1.log" 2>&1 &
pid=$!
# A random moment inside training, whatever this machine's speed: after a random number of the
# 400 steps has been logged.
at=$(/usr/bin/python3 -c 'import random; print(random.randint(20, 300))')
while kill -0 $pid 2>/dev/null && [ "$(cat "$W/preempted/metrics.jsonl" 2>/dev/null | wc -l)" -lt "$at" ]; do sleep 0.01; done
kill -TERM $pid
wait $pid
st=$?
ct train "$R" output_dir="$W/preempted" --resume >"$W/t2.log" 2>&1
sr=$?
stop_line=$(grep -o 'SIGTERM after step [0-9]* of 400' "$W/t1.log" | head -n 1)
[ $st -eq 143 ] && [ $sr -eq 0 ] && diff <(trajectory "$W/reference/metrics.jsonl") <(trajectory "$W/preempted/metrics.jsonl") >/dev/null
result "SIGTERM at a random moment" $? "exit $st ($stop_line), resumed: trajectory identical to the uninterrupted run"

# 3. Ctrl-C twice: the second ends the process at once.
"$CTUNE" --threads 2 train "$R" output_dir="$W/ctrl-c" >"$W/c1.log" 2>&1 &
pid=$!
sleep 1.5
kill -INT $pid
kill -INT $pid
wait $pid
sc=$?
ct train "$R" output_dir="$W/ctrl-c" --resume >/dev/null 2>&1
[ $sc -eq 130 ] && [ $? -eq 0 ]
result "SIGINT twice" $? "exit $sc at once, resume completes"

# 4. --overwrite / --resume into a directory holding the run's own base model, or a stranger's.
mkdir -p "$W/holder"
cp -r "$W/model" "$W/holder/model"
before=$(cat "$W/holder/model/model.safetensors" | md5sum)
recipe "$W/holder.yaml" "$W/holder/model"
ct train "$W/holder.yaml" output_dir="$W/holder" --overwrite >"$W/o1.log" 2>&1
so=$?
mkdir -p "$W/stranger"
echo precious >"$W/stranger/notes.txt"
ct train "$R" output_dir="$W/stranger" --resume >"$W/o2.log" 2>&1
ss=$?
one_line_error $so "$W/o1.log" && one_line_error $ss "$W/o2.log" && [ "$before" = "$(md5sum <"$W/holder/model/model.safetensors")" ] &&
  [ "$(cat "$W/stranger/notes.txt")" = precious ]
result "flags that destroy inputs" $? "$(tail -n 1 "$W/o1.log" | cut -c1-90)..."

# 5. A relative model.path resumed from another working directory that has another base there.
mkdir -p "$W/cwd-a" "$W/cwd-b"
cp -r "$W/model" "$W/cwd-a/base"
cp -r "$W/other-model" "$W/cwd-b/base"
recipe "$W/relative.yaml" base
(cd "$W/cwd-a" && CTUNE_KILL_AT=step:30:after ct train "$W/relative.yaml" output_dir="$W/relative" checkpoint.every_n_steps=10 >/dev/null 2>&1)
(cd "$W/cwd-b" && ct train "$W/relative.yaml" output_dir="$W/relative" --resume >"$W/rel.log" 2>&1)
sb=$?
one_line_error $sb "$W/rel.log" && grep -q "holds other content" "$W/rel.log"
result "resume onto another base" $? "$(tail -n 1 "$W/rel.log" | cut -c1-90)..."

# 6. Retention with a damaged newest checkpoint and keep_last: 1.
CTUNE_KILL_AT=checkpoint:20:renamed ct train "$R" output_dir="$W/retain" checkpoint.every_n_steps=10 checkpoint.keep_last=1 >/dev/null 2>&1
truncate -s 100 "$W/retain/checkpoints/step_00000020/optimizer.safetensors"
CTUNE_KILL_AT=step:15:mid ct train "$R" output_dir="$W/retain" checkpoint.every_n_steps=10 checkpoint.keep_last=1 --resume >/dev/null 2>&1
ct train "$R" output_dir="$W/retain" checkpoint.every_n_steps=10 checkpoint.keep_last=1 --resume >"$W/ret.log" 2>&1
sr=$?
[ $sr -eq 0 ] && grep -q "resumed from $W/retain/checkpoints/step_00000010" "$W/ret.log"
result "retention keeps the good checkpoint" $? "damaged step 20 skipped, resumed from step 10 twice"

# 7. merge/export onto their inputs, stale staging, a damaged manifest.
ct train "$R" output_dir="$W/lora" training.max_steps=10 >/dev/null 2>&1
ct merge --base "$W/model" --adapter "$W/lora/adapter" --out "$W/model" --overwrite >"$W/m1.log" 2>&1
sm=$?
ct export --model "$W/model" --out "$W/model/model.safetensors" --overwrite >"$W/m2.log" 2>&1
se=$?
mkdir -p "$W/merged.partial-999999999"
ct merge --base "$W/model" --adapter "$W/lora/adapter" --out "$W/merged" >/dev/null 2>&1
sg=$?
one_line_error $sm "$W/m1.log" && one_line_error $se "$W/m2.log" && [ $sg -eq 0 ] && [ ! -e "$W/merged.partial-999999999" ]
result "merge/export never onto inputs" $? "merge: $(tail -n 1 "$W/m1.log" | cut -c8-60)...; stale staging removed"

CTUNE_KILL_AT=step:25:after ct train "$R" output_dir="$W/manifest" checkpoint.every_n_steps=10 >/dev/null 2>&1
echo '{"format": "ctune-manifest-1", "files": []}' >"$W/manifest/checkpoints/step_00000020/MANIFEST.json"
ct train "$R" output_dir="$W/manifest" checkpoint.every_n_steps=10 --resume training.eval_every=25 >"$W/man.log" 2>&1
sm=$?
[ $sm -eq 0 ] && grep -q "step_00000020.*lists no files" "$W/man.log" && grep -q "training.eval_every. changed from 50 to 25" "$W/man.log"
result "empty manifest; --resume key=value" $? "empty manifest skipped and named; the override applied"

# 8. A disk that fills while merge copies the tokenizer (root only: a small tmpfs).
if [ "$(id -u)" -eq 0 ] && mkdir -p "$W/small" && mount -t tmpfs -o size=2m tmpfs "$W/small" 2>/dev/null; then
  weights=$(stat -c %s "$W/model/model.safetensors")
  head -c $((2 * 1024 * 1024 - weights - 12 * 1024)) /dev/zero >"$W/small/filler" 2>/dev/null
  ct merge --base "$W/model" --adapter "$W/lora/adapter" --out "$W/small/merged" >"$W/df.log" 2>&1
  sd=$?
  ls "$W/small" >"$W/df.ls"
  umount "$W/small"
  one_line_error $sd "$W/df.log" && ! grep -q '^merged$' "$W/df.ls"
  result "disk full during merge" $? "$(tail -n 1 "$W/df.log" | cut -c1-90)..."
else
  printf 'SKIP  %-34s %s\n' "disk full during merge" "needs root to mount a small tmpfs"
fi

# 9. JSON nested a million deep in every reader; a 10^8-byte dataset line.
deep=$(/usr/bin/python3 -c 'print("[" * 1000000 + "]" * 1000000)')
bad=0
details=""
mk() { rm -rf "$W/n/$1"; cp -r "$W/model" "$W/n/$1"; }
mkdir -p "$W/n"
mk config && printf '{"model_type": "llama", "rope_scaling": %s}' "$deep" >"$W/n/config/config.json"
mk tokenizer && printf '{"normalizer": %s}' "$deep" >"$W/n/tokenizer/tokenizer.json"
mk header && /usr/bin/python3 - "$W/n/header/model.safetensors" <<'EOF'
import struct, sys
h = b'{"a":' + b"[" * 1000000 + b"]" * 1000000 + b"}"
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h)
EOF
mk index && rm "$W/n/index/model.safetensors" && printf '{"weight_map": %s}' "$deep" >"$W/n/index/model.safetensors.index.json"
for case in config tokenizer header index; do
  ct score --model "$W/n/$case" --text hi >"$W/n/$case.log" 2>&1
  s=$?
  one_line_error $s "$W/n/$case.log" || { bad=1; details="$details $case:$s"; }
done
mkdir -p "$W/n/adapter" && cp "$W/lora/adapter/"* "$W/n/adapter/" && printf '{"r": %s}' "$deep" >"$W/n/adapter/adapter_config.json"
ct score --model "$W/model" --adapter "$W/n/adapter" --text hi >"$W/n/adapter.log" 2>&1
one_line_error $? "$W/n/adapter.log" || { bad=1; details="$details adapter"; }
printf '{"instruction": %s, "output": "x"}\n' "$deep" >"$W/n/deep.jsonl"
cat "$W/train.jsonl" >>"$W/n/deep.jsonl"
ct validate "$R" data.train="$W/n/deep.jsonl" >"$W/n/data.log" 2>&1
one_line_error $? "$W/n/data.log" || { bad=1; details="$details dataset"; }
printf 'seed: %s\n' "$(/usr/bin/python3 -c 'print("[" * 200000)')" >"$W/n/recipe.yaml"
ct validate "$W/n/recipe.yaml" >"$W/n/recipe.log" 2>&1
one_line_error $? "$W/n/recipe.log" || { bad=1; details="$details recipe"; }
result "JSON/YAML nested 1e6 deep" $bad "config, tokenizer, header, index, adapter, dataset, recipe: one line each${details}"

/usr/bin/python3 - "$W/huge.jsonl" "$W/train.jsonl" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write('{"instruction": "' + "x" * 100000000 + '", "output": "y"}\n')
    f.write(open(sys.argv[2]).read())
EOF
start=$(date +%s.%N)
if [ -x /usr/bin/time ]; then  # peak resident memory (package `time`)
  /usr/bin/time -f '%M' -o "$W/huge.rss" "$CTUNE" --threads 2 validate "$R" data.train="$W/huge.jsonl" data.on_error=skip >"$W/huge.log" 2>&1
else
  ct validate "$R" data.train="$W/huge.jsonl" data.on_error=skip >"$W/huge.log" 2>&1
fi
sh=$?
secs=$(/usr/bin/python3 -c "print(round($(date +%s.%N) - $start, 1))")
rss=$(( $(tail -n 1 "$W/huge.rss" 2>/dev/null || echo 0) / 1024 ))
[ $sh -eq 0 ] && grep -q "1 malformed records skipped" "$W/huge.log" && [ "$rss" -lt 1024 ]
result "10^8-byte dataset line" $? "skipped in ${secs} s, peak ${rss} MB"

# 10. fp16 with every step overflowing: no untrained result.
ct train "$R" output_dir="$W/fp16" precision=fp16 loss_scaling.init_scale=1.0e30 training.max_steps=3 >"$W/fp16.log" 2>&1
sf=$?
[ $sf -eq 1 ] && grep -q "all 3 steps were skipped" "$W/fp16.log" && [ ! -e "$W/fp16/adapter" ]
result "fp16 run that never updates" $? "$(tail -n 1 "$W/fp16.log" | cut -c1-90)..."

# 11. The --nproc store: no TCP port of the run off loopback; a stranger without the secret is
#     refused and reported, and the run finishes.
P="--nproc 2 training.max_steps=300 training.eval_every=1000"
"$CTUNE" --threads 1 train "$R" output_dir="$W/store" $P >"$W/store.log" 2>&1 &
launcher=$!
sock=""
for _ in $(seq 300); do
  for p in $(pgrep -f "output_dir=$W/store"); do
    sock=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^CTUNE_STORE_SOCKET=//p')
    [ -n "$sock" ] && break
  done
  [ -n "$sock" ] && break
  sleep 0.02
done
pids=$(pgrep -f "output_dir=$W/store" | paste -sd'|')
open=$(ss -ltnp 2>/dev/null | grep -E "pid=($pids)," | awk '{print $4}' | grep -vE '^(127\.0\.0\.1|\[::1\]):' | head -n 3)
/usr/bin/python3 -c '
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
body = b"\x02" + struct.pack("<I", 15) + b"ctune/0//failed" + struct.pack("<I", 1) + b"1"
s.sendall(struct.pack("<I", len(body)) + body); s.recv(4)' "$sock" >/dev/null 2>&1
wait $launcher
sst=$?
[ -n "$sock" ] && [ -z "$open" ] && [ $sst -eq 0 ] && grep -q "store refused a connection" "$W/store.log"
result "open rendezvous port" $? "store: ${sock:-not found} (a Unix socket), TCP off loopback: ${open:-none}; stranger refused, exit $sst"

# 12. Links planted at every pid-named staging name of export and at the lock: never written.
echo precious >"$W/victim"
last=$(cat /proc/sys/kernel/ns_last_pid)
for pid in $(seq $((last + 1)) $((last + 200))); do
  for suffix in ".tmp-$pid" ".unchecked-$pid" ".unchecked-$pid.tmp-$pid"; do ln -sf "$W/victim" "$W/planted.gguf$suffix"; done
done
ct export --model "$W/model" --out "$W/planted.gguf" >"$W/pl1.log" 2>&1
spe=$?
mkdir -p "$W/lock-run" && ln -sf "$W/victim" "$W/lock-run/.ctune.lock"
ct train "$R" output_dir="$W/lock-run" >"$W/pl2.log" 2>&1
spl=$?
[ $spe -eq 0 ] && [ ! -L "$W/planted.gguf" ] && one_line_error $spl "$W/pl2.log" && [ "$(cat "$W/victim")" = precious ]
result "links at staging names and the lock" $? "export wrote a plain file; lock: $(tail -n 1 "$W/pl2.log" | cut -c8-70)..."

# 13. An adapter whose merge is inf/NaN (lora_alpha 1e308): refused, naming the tensor.
cp -r "$W/lora/adapter" "$W/nan-adapter"
/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["lora_alpha"]=1e308; json.dump(c, open(p,"w"))' "$W/nan-adapter/adapter_config.json"
ct merge --base "$W/model" --adapter "$W/nan-adapter" --out "$W/nan-merged" >"$W/nan.log" 2>&1
one_line_error $? "$W/nan.log" && [ ! -e "$W/nan-merged" ] && grep -q "non-finite" "$W/nan.log"
result "merge that would ship NaNs" $? "$(tail -n 1 "$W/nan.log" | cut -c8-90)..."

# 14. A sharded checkpoint whose manifest lacks a rank's shard: skipped on resume.
S="--nproc 2 distributed.strategy=full_shard training.max_steps=20 checkpoint.every_n_steps=10"
ct train "$R" output_dir="$W/shards" $S >/dev/null 2>&1
ck="$W/shards/checkpoints/step_00000020"
rm -f "$ck/shards/rank-00001-of-00002.safetensors"
/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; m=json.load(open(p)); m["files"]=[f for f in m["files"] if "rank-00001" not in f["file"]]; json.dump(m, open(p,"w"))' "$ck/MANIFEST.json"
ct train "$R" output_dir="$W/shards" $S --resume >"$W/shards.log" 2>&1
ssh=$?
[ $ssh -eq 0 ] && grep -q "skipping checkpoint $ck" "$W/shards.log" && grep -q "resumed from $W/shards/checkpoints/step_00000010" "$W/shards.log"
result "checkpoint without a rank's shard" $? "skipped and named; resumed from step 10"

# 15. consolidate onto the base its checkpoint was trained on.
before=$(md5sum <"$W/model/model.safetensors")
ct consolidate "$W/shards/checkpoints/step_00000010" --out "$W/model" --overwrite >"$W/cons.log" 2>&1
one_line_error $? "$W/cons.log" && [ "$before" = "$(md5sum <"$W/model/model.safetensors")" ]
result "consolidate onto the base" $? "$(tail -n 1 "$W/cons.log" | cut -c8-90)..."

# 16. Reports: a default run (no data.eval) and hostile metrics files end, with a page.
ct train "$R" output_dir="$W/no-eval" data.eval=null training.eval_every=0 training.max_steps=10 >/dev/null 2>&1
mkdir -p "$W/hostile-report" && cp "$W/no-eval/recipe.yaml" "$W/hostile-report/"
printf '{"step": 1, "loss": 1e-320}\n{"step": 2, "loss": 1e999}\n{"step": 3, "lo\n{"step": 4, "loss": 2.0}\n' >"$W/hostile-report/metrics.jsonl"
timeout 20 "$CTUNE" report "$W/hostile-report" >/dev/null 2>&1
sh1=$?
rm "$W/hostile-report/metrics.jsonl" && ln -s /dev/zero "$W/hostile-report/metrics.jsonl"
timeout 20 "$CTUNE" report "$W/hostile-report" >/dev/null 2>&1
sh2=$?
[ -s "$W/no-eval/report.html" ] && [ $sh1 -eq 0 ] && [ $sh2 -eq 0 ]
result "reports of default runs, hostile metrics" $? "default run's report written; denormal/1e999/cut lines: exit $sh1; /dev/zero: exit $sh2"

# 17. Ctrl-Z on the --nproc launcher: the ranks save a checkpoint and stop; --resume continues.
"$CTUNE" --threads 1 train "$R" output_dir="$W/tstp" $P >"$W/tstp.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ "$(cat "$W/tstp/metrics.jsonl" 2>/dev/null | wc -l)" -ge 20 ] && break; sleep 0.02; done
kill -TSTP $launcher
wait $launcher
stz=$?
ct train "$R" output_dir="$W/tstp" $P --resume >/dev/null 2>&1
sres=$?
[ $stz -eq 143 ] && [ $sres -eq 0 ] && grep -q "Ctrl-Z (SIGTSTP)" "$W/tstp.log"
result "Ctrl-Z on the launcher" $? "exit $stz with a checkpoint, resume exit $sres"

# 18-20. Chat templates (issue 70), through `ctune render` with the template in a tokenizer's config.
mkdir -p "$W/tpl" && cp "$W/model/tokenizer.json" "$W/model/tokenizer_config.json" "$W/tpl/"
tpl_render() {  # tpl_render LOG TEMPLATE [ARGS...]: one conversation rendered with TEMPLATE (5 minutes at most)
  local log=$1 source=$2
  shift 2
  /usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["chat_template"] = sys.argv[2]
json.dump(c, open(sys.argv[1], "w"))' "$W/tpl/tokenizer_config.json" "$source"
  timeout 300 "$CTUNE" --threads 2 render --tokenizer "$W/tpl" "$@" \
    --messages '[{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Yo"}]' >"$log" 2>&1
}

# 18. Comparing, ordering or hashing a list of 10^6 references to a 30 MB string: each read its
# items' bytes uncharged (30 TB, hours); the work limit (1 GiB) now counts them.
bad=0
details=""
two="{% set a = 'x' * 30000000 %}{% set b = 'x' * 30000000 %}{% set l = [a, b] * 500000 %}"
for op in "==:l == [b, a] * 500000" "unique:l|unique|list|length" "min:l|min|length" "sort:l|sort(case_sensitive=true)|length"; do
  start=$(date +%s.%N)
  tpl_render "$W/tpl/work.log" "$two{{ ${op#*:} }}"
  s=$?
  secs=$(/usr/bin/python3 -c "print(round($(date +%s.%N) - $start, 1))")
  { one_line_error $s "$W/tpl/work.log" && grep -q "work exceeds its limit" "$W/tpl/work.log"; } || bad=1
  details="$details ${op%%:*} ${secs} s (exit $s),"
done
result "template work on shared values" $bad "work limit:${details%,}"

# 19. Builders that multiply size, under a 4 GB address space: each built 30 GB before checking the
# 32 MiB output limit (std::bad_alloc; without a limit, the OOM killer).
bad=0
details=""
s30="{% set s = 'x' * 30000000 %}"
for op in "('a\\n' * 1000)|indent(s)" "[s] * 1000" "('a' * 1000)|replace('a', s)" "('{0}' * 1000).format(s)" "([s] * 1000)|tojson"; do
  ( ulimit -v 4000000; tpl_render "$W/tpl/out.log" "$s30{{ $op }}" )
  s=$?
  { one_line_error $s "$W/tpl/out.log" && grep -q "exceeds the template output limit" "$W/tpl/out.log"; } || { bad=1; details="$details [$op: $(tail -n 1 "$W/tpl/out.log" | cut -c1-60)]"; }
done
result "template output built before its check" $bad "indent, repr, replace, format, tojson: one line each${details}"

# 20. A template that writes the answer above the conversation too: its span ran over the user's
# turn, which trained silently; now refused, naming the message.
tpl_render "$W/tpl/twice.log" "Last answer: {{ messages[-1].content }}
{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}" --json
one_line_error $? "$W/tpl/twice.log" && grep -q "messages\[1\] (assistant) is written on both sides of messages\[0\] (user)" "$W/tpl/twice.log"
result "answer written around the prompt" $? "$(tail -n 1 "$W/tpl/twice.log" | cut -c8-100)..."

echo "fault drill: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
