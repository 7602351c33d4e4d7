#!/usr/bin/python3
"""The rate a training step's GEMMs can reach on this machine, shape by shape, in PyTorch alone.

For a Hugging Face config.json and a step of TOKENS positions, times the GEMMs a LoRA or full
step runs (docs/performance.md, "What is left"), each against the 2048^3 GEMM of the same dtype,
interleaved, medians:
  projections fwd   x [n, in] . W[out, in]^T for every projection of a layer (q, k, v, o and the
                    MLP's; Phi-3's fused ones as one), over L layers' distinct operands ("cold",
                    as the step meets them) and over one layer's repeated ("hot")
  projections bwd   the input gradients dY [n, out] . W [out, in]
  experts           a mixture of experts' SwiGLU GEMMs at the mean routed rows, n k / E, fwd
  head              chunks of CHUNK rows: logits h . W^T [rows, V] and the input gradient
Run it on tcmalloc, as scripts/bench.sh runs its peers: on glibc's malloc every large output is
faulted in afresh and the head's rates halve. Without LD_PRELOAD naming tcmalloc it re-runs
itself under the library scripts/peer_allocator.sh finds. Shares no code with ctune.
  /usr/bin/python3 scripts/gemm_shapes.py --config runs/bench/smol.json --tokens 2048 --dtype bf16
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch


def preload_tcmalloc():
    if "tcmalloc" in os.environ.get("LD_PRELOAD", "") or os.environ.get("GEMM_SHAPES_NO_PRELOAD"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    lib = subprocess.run(["bash", "-c", f"source {here}/peer_allocator.sh gemm_shapes >&2; echo \"$TCMALLOC\""],
                         capture_output=True, text=True).stdout.strip()
    if not lib:
        print("gemm_shapes: no tcmalloc found; the rates include glibc's page faults", file=sys.stderr)
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, LD_PRELOAD=lib, GEMM_SHAPES_NO_PRELOAD="1"))


def projections(c):
    """(name, out, in) of one decoder layer's projections, as the checkpoint stores them."""
    H, I = c["hidden_size"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim") or H // nh
    if c["model_type"] == "phi3":
        attn = [("qkv_proj", (nh + 2 * nkv) * d, H)]
    else:
        attn = [("q_proj", nh * d, H), ("k_proj", nkv * d, H), ("v_proj", nkv * d, H)]
    attn.append(("o_proj", H, nh * d))
    if c.get("num_experts"):
        return attn  # the MLP is the experts, timed on their own
    if c["model_type"] == "phi3":
        return attn + [("gate_up_proj", 2 * I, H), ("down_proj", H, I)]
    return attn + [("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)]


def main():
    preload_tcmalloc()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="a Hugging Face config.json")
    p.add_argument("--tokens", type=int, default=2048, help="positions per step (batch x sequence)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--chunk", type=int, default=341, help="the head's rows per chunk (ctune's default for a 49k bf16 vocabulary)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    try:
        c = json.load(open(a.config))
        n, L, H, V = a.tokens, c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
        shapes = projections(c)
    except (OSError, ValueError) as e:
        sys.exit(f"gemm_shapes: {a.config}: expected a Hugging Face config.json, found: {e}")
    except KeyError as e:
        sys.exit(f"gemm_shapes: {a.config}: expected key {e} (a decoder's config.json), found none")
    rand = lambda *s: torch.randn(*s).to(dt)

    W = [[rand(o, i) for _, o, i in shapes] for _ in range(L)]
    X = [[rand(n, i) for _, o, i in shapes] for _ in range(L)]
    G = [[rand(n, o) for _, o, i in shapes] for _ in range(L)]
    proj_flop = sum(2 * n * o * i for _, o, i in shapes)

    def proj_fwd(hot):
        t = time.perf_counter()
        for l in range(L):
            k = 0 if hot else l
            for w, x in zip(W[k], X[k]):
                torch.nn.functional.linear(x, w)
        return L * proj_flop / (time.perf_counter() - t)

    def proj_bwd(hot):
        t = time.perf_counter()
        for l in range(L):
            k = 0 if hot else l
            for w, g in zip(W[k], G[k]):
                torch.mm(g, w)
        return L * proj_flop / (time.perf_counter() - t)

    cases = {"projections fwd, cold": lambda: proj_fwd(False), "projections fwd, hot": lambda: proj_fwd(True),
             "projections bwd, cold": lambda: proj_bwd(False), "projections bwd, hot": lambda: proj_bwd(True)}
    if c.get("num_experts"):
        E, k, Ie = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        m = n * k // E
        up = [rand(2, Ie, H) for _ in range(E)]  # gate and up
        down = [rand(H, Ie) for _ in range(E)]
        xe = [rand(m, H) for _ in range(E)]

        def experts():
            t = time.perf_counter()
            for e in range(E):
                g = torch.nn.functional.linear(xe[e], up[e][0])
                u = torch.nn.functional.linear(xe[e], up[e][1])
                torch.nn.functional.linear(g * u, down[e])
            return E * 3 * 2 * m * H * Ie / (time.perf_counter() - t)

        cases[f"experts fwd ({E} x [{m}, {H}] x [{H}, {Ie}])"] = experts
    head = rand(V, H)
    hid = rand(n, H)

    def head_logits():
        t = time.perf_counter()
        for s in range(0, n, a.chunk):
            torch.mm(hid[s:s + a.chunk], head.t())
        return 2 * n * V * H / (time.perf_counter() - t)

    grad = rand(a.chunk, V)

    def head_dx():
        t = time.perf_counter()
        rows = 0
        for s in range(0, n, a.chunk):
            r = min(a.chunk, n - s)
            torch.mm(grad[:r], head)
            rows += r
        return 2 * rows * V * H / (time.perf_counter() - t)

    cases[f"head logits ({a.chunk}-row chunks)"] = head_logits
    cases[f"head input gradient ({a.chunk}-row chunks)"] = head_dx
    sq_a, sq_b = rand(2048, 2048), rand(2048, 2048)

    def square():
        t = time.perf_counter()
        torch.mm(sq_a, sq_b)
        torch.mm(sq_a, sq_b)
        return 2 * 2 * 2048 ** 3 / (time.perf_counter() - t)

    cases = {"2048^3": square, **cases}
    rates = {name: [] for name in cases}
    for rep in range(a.reps + 1):  # the first round warms up (oneDNN compiles each shape once)
        for name, f in cases.items():
            r = f()
            if rep:
                rates[name].append(r / 1e9)
    ref = statistics.median(rates["2048^3"])
    print(f"GEMM rates, {a.dtype}, {a.threads} threads, {n} tokens, {L} layers ({os.path.basename(a.config)}); "
          f"medians of {a.reps}; allocator: {os.environ.get('LD_PRELOAD') or 'glibc malloc'}")
    for name, v in rates.items():
        med = statistics.median(v)
        print(f"  {name:48s} {med:8.0f} GFLOP/s  {100 * med / ref:5.1f}% of 2048^3")


if __name__ == "__main__":
    main()
