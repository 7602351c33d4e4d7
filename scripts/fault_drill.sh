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
#   of default runs and of hostile metrics, Ctrl-Z on the --nproc launcher, a rank's 1 GB stderr
#   line and a rank's child holding its stderr under the --nproc launcher; a config.json of 16M
#   expert modules, rope factors infinite in float32, plan --write onto a FIFO, a device, its
#   recipe or an existing file, a changed reference_logps.safetensors on resume, a dangling link as
#   output_dir and an empty stop string; ulimit -v from below the libraries' start to a run that
#   trains; GRPO reward programs: a request larger than a pipe to one that never reads, SIGTERM to
#   the run's process group and to every process of the job, a `regex` reward from the data that
#   backtracks without end, a program's children when the run ends; chat templates that compare
#   or hash lists of shared 30 MB strings, multiply a string past the output limit, or write the
#   answer around the prompt.
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
# Once it trains: a background job starts with SIGINT ignored (bash does that without job control),
# and until ctune installs its handler a signal is dropped, not a stop (startup takes 1-2 s).
for _ in $(seq 300); do [ -s "$W/ctrl-c/metrics.jsonl" ] && break; sleep 0.02; done
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

# 18. ulimit -v from below the libraries' start to a run that trains: each limit trains or ends
#     in one "out of memory" line, never a hang (OpenBLAS's mmap retry loop) or a signal.
ladder=ok
for mb in $(seq 700 100 2500); do
  (ulimit -v $((mb * 1024)); ulimit -t 120; ct train "$R" output_dir="$W/ladder" training.max_steps=3 --overwrite >"$W/ladder.log" 2>&1)
  sl=$?
  [ $sl -eq 0 ] && break
  { [ $sl -eq 1 ] && tail -n 1 "$W/ladder.log" | grep -q '^ctune: out of memory: '; } || { ladder="$mb MB: exit $sl"; break; }
done
[ "$ladder" = ok ] && [ $sl -eq 0 ]
result "ulimit -v ladder" $? "${ladder/ok/every limit up to $mb MB refused in one line, then trained}"

# 19-20. The --nproc launcher and what a rank's reward program (GRPO reward.command, whose
#     stderr is the rank's) does to it: a 10^9-byte stderr line without a newline, relayed in
#     64 KiB pieces with the launcher's memory bounded; a background child holding the ranks'
#     stderr, while the launcher returns when its ranks have exited (issue 70).
for i in $(seq 0 7); do echo "{\"prompt\": \"Add $i and 3 = \", \"answer\": \"$((i + 3))\"}"; done >"$W/prompts.jsonl"
grpo_with() {  # grpo_with NAME PROGRAM_LINE: $W/NAME.yaml, GRPO on 2 steps rewarded by a program
  printf '#!/bin/sh\n%s\nwhile IFS= read -r l; do echo 0.5; done\n' "$2" >"$W/$1.sh" && chmod +x "$W/$1.sh"
  cat >"$W/$1.yaml" <<EOF
output_dir: $W/$1
model: {path: $W/model}
data: {train: $W/prompts.jsonl, format: prompt, chat_format: plain, max_seq_len: 64}
peft: {method: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}
optimizer: {name: adamw, lr: 3.0e-3}
training: {batch_size: 1, grad_accum: 1, max_steps: 2, eval_every: 0}
checkpoint: {every_n_steps: 0}
objective: {name: grpo, num_generations: 4, max_new_tokens: 4}
reward: {command: [$W/$1.sh], timeout_s: 60}
EOF
}
grpo_with long-line '[ "$RANK" = 0 ] && head -c 1000000000 /dev/zero | tr "\0" x >&2'
# Only the first 100 characters of each relayed line are kept (the line itself is 1 GB).
"$CTUNE" --threads 1 train "$W/long-line.yaml" --nproc 2 >/dev/null 2> >(cut -c1-100 >"$W/long-line.log") &
launcher=$!
hwm=0
while k=$(awk '/^VmHWM/ {print $2}' "/proc/$launcher/status" 2>/dev/null) && [ -n "$k" ]; do hwm=$k; sleep 0.05; done
wait $launcher
sll=$?
sleep 1  # cut finishing the log
pieces=$(grep -c '^\[rank 0, continued\] x' "$W/long-line.log")
[ $sll -eq 0 ] && [ "$pieces" -ge 15258 ] && [ $((hwm / 1024)) -lt 300 ]
result "--nproc rank's 1 GB stderr line" $? "exit $sll, $pieces continued pieces of 64 KiB, launcher peak $((hwm / 1024)) MB"

grpo_with sleeper "sleep 600 & echo \$! >>$W/sleepers"
start=$(date +%s.%N)
timeout -s KILL 120 "$CTUNE" --threads 1 train "$W/sleeper.yaml" --nproc 2 >"$W/sleeper.log" 2>&1
sdh=$?
secs=$(/usr/bin/python3 -c "print(round($(date +%s.%N) - $start, 1))")
kill $(cat "$W/sleepers" 2>/dev/null) 2>/dev/null
[ $sdh -eq 0 ]
result "--nproc: stderr held by a child" $? "exit $sdh after ${secs} s, the reward program's \`sleep 600 &\` still holding the ranks' stderr"

# 21. Issue 70's 552-byte config: 16384 experts on each of 1024 layers, in a 4 GB address space.
cat >"$W/experts.json" <<'EOF'
{"model_type": "qwen3_moe", "vocab_size": 2, "hidden_size": 2, "intermediate_size": 1, "moe_intermediate_size": 1,
 "num_hidden_layers": 1024, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 2,
 "num_experts": 16384, "num_experts_per_tok": 1, "tie_word_embeddings": true}
EOF
(ulimit -v 4000000 && ct init --config "$W/experts.json" --out "$W/experts-model") >"$W/ex1.log" 2>&1
sx1=$?
(ulimit -v 4000000 && ct estimate "$R" model.path="$W/experts.json") >"$W/ex2.log" 2>&1
sx2=$?
one_line_error $sx1 "$W/ex1.log" && one_line_error $sx2 "$W/ex2.log" && grep -q "must be between 0 and 1024" "$W/ex2.log" &&
  [ ! -e "$W/experts-model" ]
result "config of 16M expert modules" $? "init exit $sx1, estimate exit $sx2: $(tail -n 1 "$W/ex2.log" | cut -c8-90)..."

# 22. Rope factors infinite in float32: longrope's original context 1 (ln 1 = 0 divides its
#     attention factor) and an attention_factor of 1e300.
bad=0
for extra in '"original_max_position_embeddings": 1, "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [1, 2]}' \
             '"rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [1, 2], "attention_factor": 1e300}'; do
  printf '{"model_type": "phi3", "vocab_size": 320, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 4096, %s}\n' "$extra" >"$W/rope.json"
  rm -rf "$W/rope-model"
  ct init --config "$W/rope.json" --out "$W/rope-model" --tokenizer byte >"$W/rope.log" 2>&1
  { one_line_error $? "$W/rope.log" && grep -q "past float32's range" "$W/rope.log" && [ ! -e "$W/rope-model" ]; } || bad=1
done
result "infinite rope factor" $bad "$(tail -n 1 "$W/rope.log" | cut -c8-100)..."

# 23. plan --write onto a FIFO, a device node (root only), the recipe it reads, an existing file.
mkfifo "$W/plan-fifo"
ct plan "$R" --budget 64GB --write "$W/plan-fifo" >"$W/pw1.log" 2>&1
sp1=$?
cp "$R" "$W/plan-recipe.yaml"
recipe_sum=$(md5sum <"$W/plan-recipe.yaml")
ct plan "$W/plan-recipe.yaml" --budget 64GB --write "$W/plan-recipe.yaml" >"$W/pw2.log" 2>&1
sp2=$?
echo precious >"$W/plan-out.yaml"
ct plan "$R" --budget 64GB --write "$W/plan-out.yaml" >"$W/pw3.log" 2>&1
sp3=$?
sp4=1
device="device node: skipped (needs root)"
if [ "$(id -u)" -eq 0 ] && mknod "$W/plan-null" c 1 3 2>/dev/null; then  # /dev/null's numbers, in $W
  ct plan "$R" --budget 64GB --write "$W/plan-null" >"$W/pw4.log" 2>&1
  sp4=$?
  [ -c "$W/plan-null" ] || sp4=0
  device="device node: exit $sp4, now $(stat -c %F "$W/plan-null")"
fi
one_line_error $sp1 "$W/pw1.log" && [ -p "$W/plan-fifo" ] && one_line_error $sp2 "$W/pw2.log" &&
  [ "$recipe_sum" = "$(md5sum <"$W/plan-recipe.yaml")" ] && one_line_error $sp3 "$W/pw3.log" &&
  [ "$(cat "$W/plan-out.yaml")" = precious ] && [ $sp4 -ne 0 ]
result "plan --write onto anything" $? "FIFO: exit $sp1, its own recipe: exit $sp2, an existing file: exit $sp3; $device"

# 24. A value of reference_logps.safetensors changed between a kill and --resume.
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
with open(f"{sys.argv[1]}/pairs.jsonl", "w") as f:
    for i in range(60):
        f.write(json.dumps({"prompt": f"Add {i} and 3 = ", "chosen": str(i + 3), "rejected": str(i + 4)}) + "\n")
EOF
cat >"$W/dpo.yaml" <<EOF
output_dir: $W/dpo
model: {path: $W/model}
data: {train: $W/pairs.jsonl, format: preference, chat_format: plain, max_seq_len: 64}
peft: {method: lora, rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
objective: {name: dpo, beta: 0.2, precompute_reference: true}
optimizer: {name: adamw, lr: 3.0e-3}
training: {batch_size: 4, grad_accum: 1, max_steps: 12}
checkpoint: {every_n_steps: 3, keep_last: 2}
EOF
CTUNE_KILL_AT=step:7:after ct train "$W/dpo.yaml" >/dev/null 2>&1
/usr/bin/python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0x80]))' "$W/dpo/reference_logps.safetensors"
ct train "$W/dpo.yaml" --resume >"$W/dpo1.log" 2>&1
sd1=$?
rm -f "$W/dpo/reference_logps.safetensors"
ct train "$W/dpo.yaml" --resume >"$W/dpo2.log" 2>&1
sd2=$?
one_line_error $sd1 "$W/dpo1.log" && grep -q "reference_logps.safetensors: checksum mismatch" "$W/dpo1.log" && [ $sd2 -eq 0 ]
result "changed reference table on resume" $? "refused: $(tail -n 1 "$W/dpo1.log" | cut -c8-80)...; removed, recomputed (exit $sd2)"

# 25. A dangling link as output_dir; an empty stop string in a recipe.
ln -s "$W/run-gone" "$W/run-link"
ct train "$R" output_dir="$W/run-link" >"$W/dl.log" 2>&1
sdl=$?
ct validate "$R" 'objective.stop=[""]' >"$W/stop.log" 2>&1
sst=$?
one_line_error $sdl "$W/dl.log" && grep -q "which does not exist (expected a directory or nothing)" "$W/dl.log" && [ ! -e "$W/run-gone" ] &&
  one_line_error $sst "$W/stop.log" && grep -q 'found the empty string "" at item 1' "$W/stop.log"
result "dangling output_dir, empty stop" $? "$(tail -n 1 "$W/dl.log" | cut -c8-90)..."

# 26-29. GRPO reward programs (docs/objectives.md#rewards), on prompts whose records carry a 100 KB
#     field and a regex that backtracks without end in a backtracking engine without a bound.
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
with open(f"{sys.argv[1]}/prompts.jsonl", "w") as f:
    for i in range(16):
        f.write(json.dumps({"prompt": f"Add {i} and 3 = ", "answer": str(i + 3), "notes": "n" * 100000, "pattern": "(.|.)*QQQ"}) + "\n")
EOF
grpo() {  # grpo FILE MAX_NEW_TOKENS REWARD_MAP_MEMBERS
  cat >"$1" <<EOF
model: {path: $W/model}
data: {train: $W/prompts.jsonl, format: prompt, chat_format: plain, max_seq_len: 64}
peft: {method: lora, rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
optimizer: {name: adamw, lr: 3.0e-3}
training: {batch_size: 2, grad_accum: 1, max_steps: 4}
checkpoint: {every_n_steps: 0}
objective: {name: grpo, num_generations: 2, max_new_tokens: $2}
reward: {$3}
EOF
}
# A grader answering 1 to every request; at its 6th (in step 2) it does ACT once (MARK made).
cat >"$W/signaller.py" <<'EOF'
import os, signal, sys
n, act, mark = 0, sys.argv[1], sys.argv[2]
for line in sys.stdin:
    n += 1
    if n == 6 and not os.path.exists(mark):
        open(mark, "w").close()
        if act == "group": os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)  # Ctrl-C, scancel, docker stop
        if act == "job": os.kill(os.getppid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGTERM)  # Slurm: every process
    print(1, flush=True)
EOF
printf '#!/bin/sh\nexec sleep 300\n' >"$W/hung.sh"
printf '#!/bin/sh\nsleep 300 &\necho $! >"%s/child.pid"\nwhile IFS= read -r l; do echo 1; done\n' "$W" >"$W/parent.sh"
chmod +x "$W/hung.sh" "$W/parent.sh"

grpo "$W/pipe.yaml" 4 "command: [$W/hung.sh], timeout_s: 2"
timeout -s KILL 120 "$CTUNE" --threads 2 train "$W/pipe.yaml" output_dir="$W/pipe" >"$W/pipe.log" 2>&1
sp=$?
one_line_error $sp "$W/pipe.log" && grep -q "did not read its whole request" "$W/pipe.log"
result "reward request larger than a pipe" $? "exit $sp (137: hung in write): $(tail -n 1 "$W/pipe.log" | cut -c8-90)..."

details=""
bad=0
for act in group job; do
  grpo "$W/$act.yaml" 4 "command: [/usr/bin/python3, $W/signaller.py, $act, $W/$act.mark]"
  # setsid: the run leads its own process group, which this script is not in.
  timeout -s KILL 120 setsid -w "$CTUNE" --threads 2 train "$W/$act.yaml" output_dir="$W/$act" >"$W/$act.log" 2>&1
  sg=$?
  ct train "$W/$act.yaml" output_dir="$W/$act" --resume >/dev/null 2>&1
  sgr=$?
  { [ $sg -eq 143 ] && [ -e "$W/$act/checkpoints/step_00000002/MANIFEST.json" ] && [ $sgr -eq 0 ]; } || bad=1
  details="$details $act: exit $sg, resume $sgr;"
done
result "SIGTERM to a GRPO run's group/job" $bad "${details# } (1: the grader died first, nothing saved)"

grpo "$W/regex.yaml" 48 "regex: {field: pattern}"
timeout -s KILL 120 "$CTUNE" --threads 2 train "$W/regex.yaml" output_dir="$W/regex" >"$W/regex.log" 2>&1
sx=$?
[ $sx -eq 0 ]
result "regex reward from the data" $? "(.|.)*QQQ on 48-token completions: exit $sx (137: still backtracking after 120 s)"

grpo "$W/children.yaml" 4 "command: [$W/parent.sh]"
ct train "$W/children.yaml" output_dir="$W/children" >/dev/null 2>&1
sc=$?
child=$(cat "$W/child.pid" 2>/dev/null)
sleep 0.5  # SIGKILL is delivered at once; a slow machine's margin
state=$(sed 's/.*) //' "/proc/$child/stat" 2>/dev/null | cut -c1)
[ $sc -eq 0 ] && [ -n "$child" ] && { [ -z "$state" ] || [ "$state" = Z ]; }
result "a reward program's children" $? "run exit $sc; the grader's child $child: ${state:-gone} after the run"

# 30-32. Chat templates (issue 70), through `ctune render` with the template in a tokenizer's config.
mkdir -p "$W/tpl" && cp "$W/model/tokenizer.json" "$W/model/tokenizer_config.json" "$W/tpl/"
tpl_render() {  # tpl_render LOG TEMPLATE [ARGS...]: one conversation rendered with TEMPLATE (5 minutes at most)
  local log=$1 source=$2
  shift 2
  /usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["chat_template"] = sys.argv[2]
json.dump(c, open(sys.argv[1], "w"))' "$W/tpl/tokenizer_config.json" "$source"
  timeout 300 "$CTUNE" --threads 2 render --tokenizer "$W/tpl" "$@" \
    --messages '[{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Yo"}]' >"$log" 2>&1
}

# 30. Comparing, ordering or hashing a list of 10^6 references to a 30 MB string: each read its
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

# 31. Builders that multiply size, under a 4 GB address space: each built 30 GB before checking the
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

# 32. A template that writes the answer above the conversation too: its span ran over the user's
# turn, which trained silently; now refused, naming the message.
tpl_render "$W/tpl/twice.log" "Last answer: {{ messages[-1].content }}
{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}" --json
one_line_error $? "$W/tpl/twice.log" && grep -q "messages\[1\] (assistant) is written on both sides of messages\[0\] (user)" "$W/tpl/twice.log"
result "answer written around the prompt" $? "$(tail -n 1 "$W/tpl/twice.log" | cut -c8-100)..."

echo "fault drill: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
