#!/usr/bin/env bash
# Do `ctune plan`'s choices fit, and are they good? (docs/planning.md; issue 31's acceptance.)
# On a small model (Llama, hidden 512, LAYERS layers (8), vocabulary 512; sequences of 256
# packed; a global batch of 8) every candidate the planner sees is trained for STEPS steps and measured
# (peak resident memory, median tokens/s of the steps after the first). Then, for budgets of 30%,
# 50% and 75% of the default run's measured peak (fp32, full fine-tuning, 8 x 1, no
# checkpointing), `ctune plan --json` chooses, and the script prints the chosen plan's measured
# peak against the budget and its measured tokens/s against the fastest candidate whose
# measured peak fits. The same with 2 ranks (strategy and checkpointing auto). Minutes; run it
# on a quiet machine (the tokens/s comparisons are within one run of this script). A run's
# measured peak is the whole run's (its final checkpoint and result included); every
# candidate's figures go to OUT/candidates-N.json.
# RANKS=2 runs only the 2-rank study (RANKS=1 only the 1-rank one); LAYERS=N a deeper model.
#   OUT=runs/bench-plan STEPS=4 bash scripts/bench_plan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-build/bin/ctune}
OUT=${OUT:-runs/bench-plan}
STEPS=${STEPS:-4}
LAYERS=${LAYERS:-8}
RANKS=${RANKS:-1 2}
mkdir -p "$OUT"
export XDG_CACHE_HOME="$OUT/cache"  # the machine's rates measured once for this run

/usr/bin/python3 - "$CTUNE" "$OUT" "$STEPS" "$LAYERS" "$RANKS" <<'PY'
import json, os, shutil, statistics, subprocess, sys
ctune, out, steps, layers, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()

config = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=512, hidden_size=512, intermediate_size=1376,
              num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048, rms_norm_eps=1e-5,
              rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)
json.dump(config, open(f"{out}/config.json", "w"))
if not os.path.exists(f"{out}/model/config.json") or json.load(open(f"{out}/model/config.json"))["num_hidden_layers"] != layers:
    shutil.rmtree(f"{out}/model", ignore_errors=True)
    subprocess.run([ctune, "init", "--config", f"{out}/config.json", "--out", f"{out}/model", "--tokenizer", "byte", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
recipe = f"""output_dir: {out}/run
seed: 0
threads: auto
model: {{path: {out}/model, dtype: fp32}}
data: {{train: recipes/quickstart/data/pretrain.jsonl, format: text, max_seq_len: 256, packing: true}}
precision: auto
peft: {{method: auto, rank: 8, alpha: 16, target_modules: [all-linear]}}
memory: {{activation_checkpointing: auto}}
optimizer: {{name: adamw, lr: 1.0e-4}}
scheduler: {{name: constant}}
training: {{batch_size: auto, global_batch_size: 8, max_steps: {steps}, eval_every: 0}}
checkpoint: {{every_n_steps: 0}}
logging: {{tensorboard: false}}
"""
open(f"{out}/auto.yaml", "w").write(recipe)

def train(overrides, nproc=1):
    """Peak bytes and median tokens/s (steps after the first) of a short run."""
    cmd = [ctune, "train", f"{out}/auto.yaml", "--overwrite"] + overrides
    if nproc > 1: cmd += ["--nproc", str(nproc)]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return None
    lines = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl")]
    rows = [x for x in lines if "tokens_per_s" in x]
    # The whole run's peak (the final checkpoint and the result's gather included), which the
    # planner's budget is about; the step lines' peaks where the run has no such line.
    run_peak = max([x["memory"].get("measured_run_peak_bytes", 0) for x in lines if "memory" in x] or [0])
    return max([run_peak] + [x["peak_mem_bytes"] for x in rows]), statistics.median(x["tokens_per_s"] for x in rows[1:] or rows)

def plan(budget, extra, nproc=1):
    cmd = [ctune, "plan", f"{out}/auto.yaml", "--budget", budget if isinstance(budget, str) else str(int(budget)), "--json"] + extra
    if nproc > 1: cmd += ["--nproc", str(nproc)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(r.stdout)

def study(name, extra, nproc, default):
    print(f"\n## {name}")
    base = train(extra + default, nproc)
    print(f"default run ({' '.join(default)}): measured peak {base[0]/1e6:.1f} MB, {base[1]:.0f} tokens/s")
    everything = plan("1000GB", extra, nproc)["candidates"]
    measured = {}
    for c in everything:
        measured[c["describe"]] = train(extra + c["overrides"], nproc)
    print(f"{len(everything)} candidates measured ({steps} steps each)")
    print("| budget | chosen | predicted peak | measured peak | fits | tokens/s chosen | fastest that fits (measured) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for share in (0.30, 0.50, 0.75):
        budget = share * base[0]
        p = plan(budget, extra, nproc)
        chosen = next((c for c in p["candidates"] if c["chosen"]), None)
        fitting = [(m[1], d) for d, m in measured.items() if m and m[0] <= budget]
        best = max(fitting) if fitting else None
        if not chosen:
            print(f"| {share:.0%} = {budget/1e6:.0f} MB | nothing fits: {p.get('nothing_fits', '')} | | | | | {best} | |")
            continue
        m = measured.get(chosen["describe"])
        ratio = m[1] / best[0] if m and best else float("nan")
        print(f"| {share:.0%} = {budget/1e6:.0f} MB | {chosen['describe']} | {chosen['peak_bytes']/1e6:.1f} MB | "
              f"{m[0]/1e6 if m else float('nan'):.1f} MB | {'yes' if m and m[0] <= budget else 'NO'} | {m[1] if m else float('nan'):.0f} | "
              f"{best[1] if best else '-'}: {best[0] if best else float('nan'):.0f} | {ratio:.2f} |")
    # Predicted against measured over every candidate.
    ratios = [c["peak_bytes"] / measured[c["describe"]][0] for c in everything if measured.get(c["describe"])]
    print(f"predicted/measured peak over the candidates: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    # The step-time model: predicted against measured tokens/s, and how well it orders them
    # (Spearman's rank correlation; 1: the same order).
    both = [(c["tokens_per_s"], measured[c["describe"]][1]) for c in everything if measured.get(c["describe"])]
    speed = [p / m for p, m in both]
    def ranks(v): return [sorted(v).index(x) for x in v]
    rp, rm = ranks([p for p, _ in both]), ranks([m for _, m in both])
    n = len(both)
    rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(rp, rm)) / (n * (n * n - 1)) if n > 1 else float("nan")
    print(f"predicted/measured tokens/s over the candidates: min {min(speed):.2f}, median {statistics.median(speed):.2f}, max {max(speed):.2f}; "
          f"rank correlation {rho:.2f}")
    json.dump([dict(c, measured_peak_bytes=measured[c["describe"]][0] if measured.get(c["describe"]) else None,
                    measured_tokens_per_s=measured[c["describe"]][1] if measured.get(c["describe"]) else None) for c in everything],
              open(f"{out}/candidates-{nproc}.json", "w"), indent=1)

if "1" in ranks: study("1 rank (precision, method, checkpointing, micro-batch auto)", ["memory.quantize_base=none", "memory.chunked_loss=true"], 1,
      ["precision=fp32", "peft.method=none", "memory.activation_checkpointing=none", "training.batch_size=8", "training.grad_accum=1"])
if "2" in ranks: study("2 ranks (strategy, checkpointing, micro-batch auto; full fine-tuning, bf16)",
      ["precision=bf16", "peft.method=none", "memory.quantize_base=none", "memory.chunked_loss=true", "distributed.strategy=auto",
       "distributed.cpu_offload=false"], 2,
      ["memory.activation_checkpointing=none", "training.batch_size=4", "training.grad_accum=1", "distributed.strategy=no_shard"])
PY
