#!/usr/bin/env bash
# Where the step goes in the cases that cost more than they compute (docs/performance.md, "Why
# an int8 base or full_shard is slower"): `logging.profile` over a small Llama (hidden 512,
# 8 layers, vocabulary 512; 256-token packed rows), REPS repetitions interleaved:
#   1 rank, LoRA bf16 (batch 8): quantize_base none / int8 / nf4
#   2 ranks of one thread, full fine-tuning fp32 (4 rows each): no_shard / shard_grad_op / full_shard
# For each run: the median step time (metrics.jsonl), the sum of the categories' medians against
# it, and the categories that differ between the cases. Minutes; run it on a quiet machine.
#   OUT=runs/profile-cases REPS=2 bash scripts/profile_cases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-build/bin/ctune}
OUT=${OUT:-runs/profile-cases}
REPS=${REPS:-2}
STEPS=${STEPS:-8}
mkdir -p "$OUT"

/usr/bin/python3 - "$CTUNE" "$OUT" "$REPS" "$STEPS" <<'PY'
import json, os, statistics, subprocess, sys
ctune, out, reps, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
config = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=512, hidden_size=512, intermediate_size=1376,
              num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048, rms_norm_eps=1e-5,
              rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)
json.dump(config, open(f"{out}/config.json", "w"))
if not os.path.exists(f"{out}/model/config.json"):
    subprocess.run([ctune, "init", "--config", f"{out}/config.json", "--out", f"{out}/model", "--tokenizer", "byte", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
open(f"{out}/recipe.yaml", "w").write(f"""output_dir: {out}/run
seed: 0
model: {{path: {out}/model, dtype: fp32}}
data: {{train: recipes/quickstart/data/pretrain.jsonl, format: text, max_seq_len: 256, packing: true}}
peft: {{method: lora, rank: 8, alpha: 16, target_modules: [all-linear]}}
optimizer: {{name: adamw, lr: 1.0e-4}}
scheduler: {{name: constant}}
training: {{max_steps: {steps}, eval_every: 0}}
checkpoint: {{every_n_steps: 0}}
logging: {{tensorboard: false, profile: true}}
""")
cases = {
    "lora bf16, base none": (1, ["precision=bf16", "threads=2", "training.batch_size=8", "memory.quantize_base=none"]),
    "lora bf16, base int8": (1, ["precision=bf16", "threads=2", "training.batch_size=8", "memory.quantize_base=int8"]),
    "lora bf16, base nf4": (1, ["precision=bf16", "threads=2", "training.batch_size=8", "memory.quantize_base=nf4"]),
    "full fp32, 2 ranks no_shard": (2, ["precision=fp32", "peft.method=none", "threads=1", "training.batch_size=4", "distributed.strategy=no_shard"]),
    "full fp32, 2 ranks shard_grad_op": (2, ["precision=fp32", "peft.method=none", "threads=1", "training.batch_size=4", "distributed.strategy=shard_grad_op"]),
    "full fp32, 2 ranks full_shard": (2, ["precision=fp32", "peft.method=none", "threads=1", "training.batch_size=4", "distributed.strategy=full_shard"]),
}
runs = {name: [] for name in cases}
for rep in range(reps):
    for name, (nproc, overrides) in cases.items():
        cmd = [ctune, "train", f"{out}/recipe.yaml", "--overwrite"] + overrides + (["--nproc", str(nproc)] if nproc > 1 else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl") if '"profile_ms"' in l][1:]  # the first step warms up
        step = statistics.median(r["input_tokens"] / r["tokens_per_s"] * 1e3 for r in rows)
        cats = {}
        for r in rows:
            for k, v in r["profile_ms"].items(): cats.setdefault(k, []).append(v)
        runs[name].append((step, {k: statistics.median(v) for k, v in cats.items()}))
shown = ["matmul forward", "matmul backward", "attention", "element-wise", "copies and casts", "optimizer", "dequantise", "collectives", "untracked"]
print(f"{'case':34} {'step ms':>8} {'sum/step':>8}  " + "  ".join(f"{c[:12]:>12}" for c in shown))
for name, results in runs.items():
    for step, med in results:
        total = sum(med.values())
        print(f"{name:34} {step:8.1f} {total / step:8.3f}  " + "  ".join(f"{med.get(c, 0.0):12.1f}" for c in shown))
PY
