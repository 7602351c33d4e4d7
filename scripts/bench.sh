#!/usr/bin/env bash
# The speed benchmark of ctune's training step, side by side with the same step in PyTorch eager
# on the same LibTorch kernels (python3-torch), in the same invocation, against two peers:
#   HF     scripts/bench_eager.py: the step a Hugging Face transformers + PEFT user runs;
#   lean   scripts/bench_eager_lean.py: the fastest plain eager step (no extra casts, LoRA on
#          the bf16 activations, grouped attention without repeated K/V; issue 33).
# Not part of the test run (minutes). For each configuration it runs ctune and the two peers in
# turn, REPS times (interleaved, so a noisy neighbour hits all), and prints one table of medians:
#   tokens/s       input tokens per second of a step (median over steps 2..STEPS)
#   MFU            model FLOPs per second over the GEMM rate of the same dtype measured in the
#                  same repetition, between the sides (bench_eager.py gemm: the best of 10 2048^3
#                  matmuls; these shared machines' rate drifts by 2x over minutes), the median
#                  over repetitions; model FLOPs per token: forward 2 N + backward
#                  2 N (input gradients) + 2 N_trainable (weight gradients), N the matmul
#                  weights (head included, embedding not), plus attention 4 T nh d per layer
#                  forward and twice that backward (no causal discount, as PaLM counts)
#   sys            system time over the process's CPU time during the timed steps
#   peak           resident high-water mark during training (VmHWM reset after loading, both)
#   vs HF, vs lean ctune tokens/s over each peer's (the median of the runs' ratios)
# On a CPU without AVX-512 the peers' bf16 matmuls run ATen's scalar loop (about 40x below fp32)
# while ctune's run in fp32 (docs/performance.md, "16-bit matmuls on a CPU without them"): read
# bf16 ratios from an AVX-512 machine.
# Both peers run with tcmalloc preloaded (scripts/peer_allocator.sh says why; TCMALLOC= runs them
# on glibc's malloc). ctune needs no preload: it pools its tensors.
# Workloads: the SmolLM-135M shape of issue 15 (hidden 576, 30 layers, 9/3 heads, inter 1536,
# vocab 49152, untied) with LoRA rank 8 on q,v and full fine-tuning, fp32 and bf16, packed (the
# quickstart's short stories) and unpacked (rows filled by long documents), seq 512 batch 4; LoRA
# bf16 at seq 2048 batch 1; the quickstart's tiny Llama (full fp32, seq 256, batch 16). One row per
# family on the same shape (LoRA bf16, seq 512 batch 4, head_dim 64, untied): qwen3 (q/k norms),
# gemma2 (caps 50/30, windows of 256 on the even layers), gemma3_text (5 local layers of 6, window
# 256, local RoPE theta), phi3 (fused projections, LoRA on qkv_proj, rotary 0.75), smollm3 (NoPE
# every 4th layer); the eager peer builds each from the same config (bench_eager.py Family).
# Mixture of experts (issue 29): a small Qwen3-MoE shape (hidden 512, 8 layers, 8/4 heads of 64,
# 32 experts of 256, 8 per token, vocab 49152, untied), LoRA bf16 and full fp32, seq 512 batch 4,
# against transformers' expert loop (bench_eager.py SparseMoe; the lean peer runs the same loop);
# both sides add 0.001 times the load-balancing loss. Its MFU counts the routed FLOPs only (k of
# E experts per token).
# Qwen3.5 (issue 65): 0.8B's proportions at hidden 512, 8 layers (6 Gated DeltaNet with 4 key and
# 8 value heads of 128, 2 gated full attention with 4/2 heads of 128, a quarter rotated), LoRA on
# q, v, in_proj_qkv and out_proj; both peers run transformers' torch fallbacks for the DeltaNet
# (its chunk loop: bench_eager.py GatedDeltaNet). Its MFU also counts the chunked rule's FLOPs
# (deltanet_flops_per_token below).
# DPO (issue 30): the smol shape, 2 pairs of 512-token rows (a 128-token prompt shared, two
# responses), LoRA bf16 (the reference is the base, adapters off) and full bf16 (a frozen copy),
# against TRL's DPOTrainer step (bench_eager.py dpo_loss); tokens count both rows of a pair and the
# model FLOPs add the reference's forward.
#   bash scripts/bench.sh                    # every row, REPS=3 STEPS=4
#   ONLY='lora bf16,quickstart' REPS=1 bash scripts/bench.sh   # rows whose name contains one of these
#   ONLY='smol lora bf16$' bash scripts/bench.sh   # a trailing $: exactly this row
#   CTUNE_ARGS='memory.attention=materialized' bash scripts/bench.sh   # recipe overrides for ctune
#   KEEP=1 ONLY=quickstart bash scripts/bench.sh   # add rows to the previous table (long runs in parts)
#   NEIGHBOURS=busy0,busy0s,busy19,mixed,ctune ONLY=quickstart PEERS=0 bash scripts/bench.sh   # beside a neighbour
# NEIGHBOURS: each repetition also runs ctune's step beside each of these (scripts/neighbours.sh
# says what each is), started before and stopped after, and a second table gives each as a ratio
# to the quiet step of the same repetition (the median over repetitions; docs/performance.md,
# "Beside a neighbour"). PEERS=0 skips the PyTorch peers (the neighbour table needs none).
set -euo pipefail
cd "$(dirname "$0")/.."
CTUNE=${CTUNE:-./build/bin/ctune}
[[ -x $CTUNE ]] || CTUNE_TARGETS=ctune bash scripts/build.sh build
PY=/usr/bin/python3  # Debian's python3 with python3-torch (a pyenv python3 may shadow it)
OUT=${OUT:-runs/bench}
REPS=${REPS:-3}
STEPS=${STEPS:-4}
ONLY=${ONLY:-}
CTUNE_ARGS=${CTUNE_ARGS:-}
NEIGHBOURS=${NEIGHBOURS:-}
PEERS=${PEERS:-1}
THREADS=${THREADS:-$(nproc)}
source scripts/peer_allocator.sh bench
mkdir -p "$OUT"

# The models (random weights, fp32 files) and the data.
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
smol = json.load(open("recipes/models/smollm2-135m.json"))
smol["tie_word_embeddings"] = False
json.dump(smol, open(f"{out}/smol.json", "w"), indent=1)
stories = [json.loads(l)["text"] for l in open("recipes/quickstart/data/pretrain.jsonl")]
with open(f"{out}/long.jsonl", "w") as f:  # documents longer than any row: unpacked rows are full
    for i in range(0, len(stories) - 60, 20):  # 60 stories: ~8,500 bytes, past seq 2048
        f.write(json.dumps({"text": " ".join(stories[i:i + 60])}) + "\n")
families = {  # the smol shape with each family's own keys
    "qwen3": {"head_dim": 64, "rope_theta": 1000000.0, "use_sliding_window": False},
    "gemma2": {"head_dim": 64, "query_pre_attn_scalar": 64, "sliding_window": 256, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3_text": {"head_dim": 64, "query_pre_attn_scalar": 64, "sliding_window": 256, "sliding_window_pattern": 6,
                    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "hidden_activation": "gelu_pytorch_tanh"},
    "phi3": {"partial_rotary_factor": 0.75, "sliding_window": None},
    "smollm3": {"no_rope_layer_interval": 4, "rope_theta": 2000000.0, "use_sliding_window": False},
}
for family, keys in families.items():
    cfg = dict(smol, model_type=family, **keys)
    cfg.pop("architectures", None)
    json.dump(cfg, open(f"{out}/{family}.json", "w"), indent=1)
qwen3moe = dict(model_type="qwen3_moe", vocab_size=49152, hidden_size=512, intermediate_size=1536, moe_intermediate_size=256,
                num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=64, num_experts=32,
                num_experts_per_tok=8, norm_topk_prob=True, router_aux_loss_coef=0.001, max_position_embeddings=4096,
                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="float32",
                bos_token_id=256, eos_token_id=257)
json.dump(qwen3moe, open(f"{out}/qwen3moe.json", "w"), indent=1)
# Qwen3.5-0.8B's layer at a smaller width and depth: 6 DeltaNet layers and 2 gated full-attention
# layers (heads of 128, a quarter rotated), value heads twice the key heads, as in the 4B and 9B.
qwen35 = dict(model_type="qwen3_5_text", vocab_size=49152, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, head_dim=128, attn_output_gate=True,
              linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128, linear_value_head_dim=128,
              linear_conv_kernel_dim=4, full_attention_interval=4,
              layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(8)],
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
              max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=False,
              torch_dtype="float32", bos_token_id=256, eos_token_id=257)
json.dump(qwen35, open(f"{out}/qwen35.json", "w"), indent=1)
with open(f"{out}/pairs.jsonl", "w") as f:  # DPO rows: byte tokens, bos + 127 + 383 + eos = 512 per row
    text = " ".join(stories)
    for i in range(200):
        at = i * 900
        f.write(json.dumps({"prompt": text[at:at + 127], "chosen": text[at + 127:at + 510],
                            "rejected": text[at + 510:at + 893]}) + "\n")
with open(f"{out}/doc_lengths.txt", "w") as f:  # the packed rows' documents, for the eager peer
    f.write(" ".join(str(len(s.encode()) + 2) for s in stories[:4000]))
PY
cp recipes/models/tiny-llama.json "$OUT/tiny.json"
for m in smol tiny qwen3 gemma2 gemma3_text phi3 smollm3 qwen3moe qwen35; do
  [[ -f $OUT/$m/config.json ]] ||
    $CTUNE init --config "$OUT/$m.json" --out "$OUT/$m" --tokenizer byte --seed 0 --dtype fp32 >/dev/null
done

# name | model | method | precision | seq | batch | packed [| objective: sft, or dpo with batch in pairs]
GRID=(
  "smol lora bf16|smol|lora|bf16|512|4|no"
  "smol lora bf16 packed|smol|lora|bf16|512|4|yes"
  "smol lora fp32|smol|lora|fp32|512|4|no"
  "smol lora fp32 packed|smol|lora|fp32|512|4|yes"
  "smol full bf16|smol|full|bf16|512|4|no"
  "smol full bf16 packed|smol|full|bf16|512|4|yes"
  "smol full fp32|smol|full|fp32|512|4|no"
  "smol full fp32 packed|smol|full|fp32|512|4|yes"
  "smol lora bf16 seq 2048|smol|lora|bf16|2048|1|no"
  "quickstart lora fp32|tiny|lora|fp32|256|16|no"
  "quickstart full fp32|tiny|full|fp32|256|16|no"
  "quickstart full fp32 packed|tiny|full|fp32|256|16|yes"
  "qwen3 lora bf16|qwen3|lora|bf16|512|4|no"
  "gemma2 lora bf16|gemma2|lora|bf16|512|4|no"
  "gemma3 lora bf16|gemma3_text|lora|bf16|512|4|no"
  "phi3 lora bf16|phi3|lora|bf16|512|4|no"
  "smollm3 lora bf16|smollm3|lora|bf16|512|4|no"
  "qwen3moe lora bf16|qwen3moe|lora|bf16|512|4|no"
  "qwen3moe full fp32|qwen3moe|full|fp32|512|4|no"
  "qwen35 lora bf16|qwen35|lora|bf16|512|4|no"
  "qwen35 lora fp32|qwen35|lora|fp32|512|4|no"
  "qwen35 full fp32|qwen35|full|fp32|512|4|no"
  "smol dpo lora bf16|smol|lora|bf16|512|2|no|dpo"
  "smol dpo full bf16|smol|full|bf16|512|2|no|dpo"
)

ctune_row() {  # name model method precision seq batch packed objective -> one JSON line
  local run="$OUT/run" data=$OUT/long.jsonl format=text peft=none targets="q_proj, v_proj"
  [[ $7 == yes ]] && data=recipes/quickstart/data/pretrain.jsonl
  [[ $8 == dpo ]] && data=$OUT/pairs.jsonl format=preference
  [[ $3 == lora ]] && peft=lora
  [[ $2 == phi3 ]] && targets=qkv_proj  # Phi-3's fused projection, as PEFT names it
  [[ $2 == qwen35 ]] && targets="q_proj, v_proj, in_proj_qkv, out_proj"  # and the DeltaNet's input and output
  rm -rf "$run"
  cat >"$OUT/recipe.yaml" <<YAML
output_dir: $run
seed: 0
threads: $THREADS
model: {path: $OUT/$2, dtype: fp32}
data: {train: $data, format: $format, max_seq_len: $5, packing: $([[ $7 == yes ]] && echo true || echo false)}
objective: {name: $8}
peft: {method: $peft, rank: 8, alpha: 16, target_modules: [$targets]}
precision: $4
optimizer: {name: adamw, lr: 1.0e-4}
scheduler: {name: constant, warmup_steps: 0}
training: {batch_size: $6, grad_accum: 1, max_steps: $STEPS, eval_every: 0}
checkpoint: {every_n_steps: 0}
logging: {every_n_steps: 1}
YAML
  # shellcheck disable=SC2086
  if ! $CTUNE train "$OUT/recipe.yaml" $CTUNE_ARGS >"$OUT/ctune.log" 2>&1; then
    echo "bench: ctune train failed on \"$1\", see $OUT/ctune.log" >&2
    exit 1
  fi
  $PY - "$run/metrics.jsonl" <<'PY'
import json, statistics, sys
steps, memory = [], {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "memory" in j: memory = j["memory"]
    elif "loss" in j: steps.append(j)
timed = steps[1:] or steps
cpu = timed[-1]["cpu_s"] - steps[0]["cpu_s"]
sys_s = timed[-1]["sys_s"] - steps[0]["sys_s"]
print(json.dumps({"tokens_per_s": statistics.median(s["tokens_per_s"] for s in timed), "sys_share": sys_s / cpu if cpu > 0 else 0,
                  "peak_bytes": memory.get("measured_peak_bytes", 0), "predicted_bytes": memory.get("peak_bytes", 0)}))
PY
}

peer_row() {  # script name model method precision seq batch packed objective
  local script=$1 lengths=()
  shift
  [[ $7 == yes ]] && lengths=(--doc-lengths "$OUT/doc_lengths.txt")
  LD_PRELOAD=$TCMALLOC $PY "scripts/$script" step --config "$OUT/$2.json" --method "$3" --precision "$4" --seq "$5" --batch "$6" \
    --steps "$STEPS" --threads "$THREADS" --objective "$8" "${lengths[@]}"
}

# The neighbours (scripts/neighbours.sh): a second ctune trains the same row, in a loop.
source scripts/neighbours.sh
neighbour_ctune() {
  cp "$OUT/recipe.yaml" "$OUT/neighbour.yaml"
  echo "while :; do $CTUNE train $OUT/neighbour.yaml output_dir=$OUT/neighbour-run training.max_steps=1000 $CTUNE_ARGS --overwrite >/dev/null 2>&1; done"
}

[[ ${KEEP:-0} == 1 ]] || : >"$OUT/results.jsonl"  # KEEP=1: add to an earlier invocation's rows
echo "{\"peer_allocator\": \"${TCMALLOC:-glibc malloc}\"}" >>"$OUT/results.jsonl"
for dtype in fp32 bf16; do
  $PY scripts/bench_eager.py gemm --dtype $dtype --threads "$THREADS" >>"$OUT/results.jsonl"
done
for row in "${GRID[@]}"; do
  IFS='|' read -r name model method precision seq batch packed objective <<<"$row"
  objective=${objective:-sft}
  wanted=${ONLY:+no}
  IFS=',' read -ra pieces <<<"$ONLY"
  for piece in "${pieces[@]}"; do
    if [[ $piece == *'$' ]]; then [[ $name == "${piece%$}" ]] && wanted=; else [[ $name == *"$piece"* ]] && wanted=; fi
  done
  [[ -z $wanted ]] || continue
  for ((rep = 0; rep < REPS; rep++)); do
    c=$(ctune_row "$name" "$model" "$method" "$precision" "$seq" "$batch" "$packed" "$objective")
    g=$($PY scripts/bench_eager.py gemm --dtype "$precision" --threads "$THREADS" --repeats 10)
    peers=""
    if [[ $PEERS != 0 ]]; then
      e=$(peer_row bench_eager.py "$name" "$model" "$method" "$precision" "$seq" "$batch" "$packed" "$objective")
      l=$(peer_row bench_eager_lean.py "$name" "$model" "$method" "$precision" "$seq" "$batch" "$packed" "$objective")
      peers=", \"eager\": $e, \"lean\": $l"
    fi
    beside=()
    for neighbour in ${NEIGHBOURS//,/ }; do
      start_neighbour "$neighbour"
      beside+=("\"$neighbour\": $(ctune_row "$name" "$model" "$method" "$precision" "$seq" "$batch" "$packed" "$objective")")
      stop_neighbour
    done
    echo "{\"name\": \"$name\", \"model\": \"$model\", \"method\": \"$method\", \"precision\": \"$precision\", \"seq\": $seq, \"batch\": $batch, \"objective\": \"$objective\", \"gemm\": $g, \"ctune\": $c$peers, \"beside\": {$(IFS=,; echo "${beside[*]}")}}" >>"$OUT/results.jsonl"
    echo "done: $name ($((rep + 1))/$REPS)" >&2
  done
done
for dtype in fp32 bf16; do  # the GEMM rate again: the median of before and after
  $PY scripts/bench_eager.py gemm --dtype $dtype --threads "$THREADS" >>"$OUT/results.jsonl"
done

$PY - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows, gemm, allocators = {}, {"fp32": [], "bf16": []}, []
for line in open(f"{out}/results.jsonl"):
    j = json.loads(line)
    if "flops_per_s" in j: gemm[j["dtype"]].append(j["flops_per_s"])
    elif "peer_allocator" in j: allocators.append(j["peer_allocator"])
    else: rows.setdefault(j["name"], []).append(j)

def deltanet_flops_per_token(cfg, seq):
    """A Qwen3.5 model's DeltaNet layers per token: (projections' weights, the chunked rule's
    forward FLOPs). Per value head, in chunks of C = 64 counted as full squares (as attention is
    counted without a causal discount): q k^T and (beta k) k^T 2 x 2 C Dk, the two triangular
    solves 2 C (Dk + Dv), the intra-chunk product with the new values 2 C Dv, and the three
    products with the [Dk, Dv] state (the old state read by the keys and by the queries, the
    update) 3 x 2 Dk Dv."""
    H, Hk, Hv = cfg["hidden_size"], cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    Dk, Dv, C = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], min(64, seq)
    K, Vd = Hk * Dk, Hv * Dv
    n = sum(t == "linear_attention" for t in cfg["layer_types"])
    weights = H * (2 * K + Vd) + H * Vd + 2 * H * Hv + Vd * H
    rule = Hv * (4 * C * Dk + 2 * C * (Dk + Dv) + 2 * C * Dv + 6 * Dk * Dv)
    return n * weights, n * rule


def model_flops_per_token(cfg, method, seq, objective):
    H, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or H // nh
    if cfg.get("model_type") == "qwen3_5_text":  # gated full attention (q_proj twice as wide), DeltaNet layers
        La = sum(t == "full_attention" for t in cfg["layer_types"])
        gdn_weights, rule = deltanet_flops_per_token(cfg, seq)
        n = La * (H * nh * d * 3 + H * nkv * d * 2) + L * 3 * H * I + gdn_weights + H * V
        per_layer_lora = [8 * (H + 2 * nh * d) + 8 * (H + nkv * d)] * La + \
            [8 * (H + 2 * cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"] + cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"])
             + 8 * (cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"] + H)] * (L - La)
        trainable = sum(per_layer_lora) if method == "lora" else n
        if method == "lora":
            n += trainable
        return 2 * n + 2 * n + 2 * trainable + 3 * (La * 4 * seq * nh * d + rule)
    if cfg.get("model_type") == "qwen3_moe":  # every layer sparse here: k routed experts and the router
        I = cfg["num_experts_per_tok"] * cfg["moe_intermediate_size"]
        n = L * (H * nh * d * 2 + H * nkv * d * 2 + 3 * H * I + H * cfg["num_experts"]) + H * V
    else:
        n = L * (H * nh * d * 2 + H * nkv * d * 2 + 3 * H * I) + H * V
    if method == "lora" and cfg.get("model_type") == "phi3":  # rank 8 A and B on the fused qkv_proj
        trainable = L * 8 * (H + (nh + 2 * nkv) * d)
        n += trainable
    elif method == "lora":  # rank 8 A and B on q and v
        trainable = L * (8 * (H + nh * d) + 8 * (H + nkv * d))
        n += trainable
    else:
        trainable = n
    attention = L * 4 * seq * nh * d
    if objective == "dpo":  # the reference's forward besides the policy's step, on every row
        return 2 * n + 2 * n + 2 * trainable + 3 * attention + 2 * n + attention
    return 2 * n + 2 * n + 2 * trainable + 3 * attention

med = statistics.median
print(f"GEMM 2048^3 in this run (before and after): fp32 {med(gemm['fp32']) / 1e9:.0f} GFLOP/s, bf16 {med(gemm['bf16']) / 1e9:.0f} GFLOP/s")
print(f"the peers' allocator: {', '.join(sorted(set(allocators))) or 'glibc malloc (results from before it was recorded)'}")
sides = ("ctune", "eager", "lean")  # eager: the HF/PEFT-style peer
with_peers = {name: rs for name, rs in rows.items() if all("eager" in r for r in rs)}
print("| workload | tok/s ctune / HF / lean | vs HF | vs lean | MFU ctune / HF / lean | sys ctune / HF / lean | peak MB ctune / HF / lean | runs |")
print("|---|---|---|---|---|---|---|---|")
for name, rs in with_peers.items():
    r0 = rs[0]
    cfg = json.load(open(f"{out}/{r0['model']}.json"))
    per_token = model_flops_per_token(cfg, r0["method"], r0["seq"], r0.get("objective", "sft"))
    rate = med(gemm[r0["precision"]])
    c = lambda key, side: med(r[side][key] for r in rs if side in r)
    tps = [c("tokens_per_s", side) for side in sides]
    # Each repetition against the GEMM rate measured within it (older result lines: the run's).
    mfu = " / ".join(f"{med(r[side]['tokens_per_s'] * per_token / r.get('gemm', {}).get('flops_per_s', rate) for r in rs):.1%}"
                     for side in sides)
    sys_share = " / ".join(f"{c('sys_share', side):.1%}" for side in sides)
    peak = " / ".join(f"{c('peak_bytes', side) / 1e6:.0f}" for side in sides)
    ratio = lambda peer: med(r["ctune"]["tokens_per_s"] / r[peer]["tokens_per_s"] for r in rs)
    print(f"| {name} | {' / '.join(f'{t:.0f}' for t in tps)} | {ratio('eager'):.2f} | {ratio('lean'):.2f} | {mfu} | {sys_share} | {peak} | {len(rs)} |")
# Beside a neighbour: each repetition's step beside it over the same repetition's quiet step.
beside = {name: rs for name, rs in rows.items() if any(r.get("beside") for r in rs)}
if beside:
    kinds = sorted({k for rs in beside.values() for r in rs for k in r.get("beside", {})})
    print()
    print("beside a neighbour: ctune tokens/s over its quiet tokens/s in the same repetition (median)")
    print("| workload | quiet tok/s | " + " | ".join(kinds) + " | runs |")
    print("|---|---|" + "---|" * len(kinds) + "---|")
    for name, rs in beside.items():
        quiet = med(r["ctune"]["tokens_per_s"] for r in rs)
        ratios = []
        for k in kinds:
            xs = [r["beside"][k]["tokens_per_s"] / r["ctune"]["tokens_per_s"] for r in rs if k in r.get("beside", {})]
            ratios.append(f"{med(xs):.2f}" if xs else "-")
        print(f"| {name} | {quiet:.0f} | " + " | ".join(ratios) + f" | {len(rs)} |")
# Packed rows should cost what unpacked rows cost at the same tokens per batch.
for name, rs in rows.items():
    if name.endswith(" packed") and name[:-7] in rows:
        unpacked = med(r["ctune"]["tokens_per_s"] for r in rows[name[:-7]])
        print(f"{name}: ctune step time {unpacked / med(r['ctune']['tokens_per_s'] for r in rs):.2f}x the unpacked step's")
PY
