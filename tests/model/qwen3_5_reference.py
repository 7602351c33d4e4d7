"""Independent reference for the Qwen3.5 family (dense and MoE, 3.5 / 3.6 / 3.8 share it) and
Qwen3-Next: config.json key sets as the released checkpoints carry them, tensor names and shapes,
random weights, and a float64 forward written from transformers' modeling_qwen3_5.py /
modeling_qwen3_5_moe.py / modeling_qwen3_next.py. Used by make_reference.py; shares no code with
ctune.

A decoder layer is a token mixer plus a SwiGLU MLP (or, in the MoE variant, a routed block with a
sigmoid-gated shared expert), each behind a pre-norm and a residual. The mixer is one of:
- full attention (`full_attention` layers): q_proj emits per head [query (d), gate (d)]; q_norm and
  k_norm over d; RoPE on the leading rotary_dim = d * partial_rotary_factor dimensions only;
  causal softmax attention with GQA; the output times sigmoid(gate) before o_proj.
- Gated DeltaNet (`linear_attention` layers): in_proj_qkv -> [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)]
  channels, a depthwise causal conv1d (kernel K, no bias) + SiLU over them; beta = sigmoid(b),
  g = -exp(A_log) softplus(a + dt_bias); q and k L2-normalised (x / sqrt(sum x^2 + 1e-6)), q
  scaled by Dk^-0.5, each q/k head serving Hv / Hk consecutive value heads; the delta rule in
  its plain per-token recurrent form (below); a gated RMSNorm per value head (plain weight, not
  1 + w) times silu(z); out_proj.
Every other RMSNorm (input/post-attention, final, q/k) scales by (1 + w).

The delta rule, per value head, state S [Dk, Dv] starting at zero:
    S <- exp(g_t) S;   S <- S + k_t (beta_t (v_t - S^T k_t))^T;   o_t = S^T q_t
computed token by token here (never chunked), so it checks ctune's chunked form independently.

Text-only positions make Qwen3.5's interleaved M-RoPE (mrope_section) plain RoPE: the temporal,
height and width position rows are all arange(T).

Qwen3-Next (Qwen3NextForCausalLM) has the same mixers and norms. What differs:
- its checkpoints hold the DeltaNet's input projections fused, rows grouped per key head
  (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering): in_proj_qkvz is, for each of the Hk
  groups, [q (Dk) | k (Dk) | v (r Dv) | z (r Dv)] rows with r = Hv / Hk, and in_proj_ba
  [b (r) | a (r)]; the value heads of group g are g r .. g r + r - 1;
- by Qwen3NextDecoderLayer's rule a layer's MLP is the sparse block when num_experts > 0, the
  layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0, else a dense
  SwiGLU of intermediate_size; the router renormalises its top k only under norm_topk_prob;
- its released checkpoints (transformers 4.57) store one module per expert
  (mlp.experts.N.{gate,up,down}_proj.weight), and its config the v4 spelling (rope_theta,
  partial_rotary_factor at the top, rope_scaling null).
"""
import math

import torch

# The three variants: dense text checkpoints (Qwen3_5ForCausalLM), the multimodal wrapper the
# released checkpoints use (Qwen3_5ForConditionalGeneration: text fields under text_config,
# tensors under model.language_model., vision tower and MTP head beside them), and the MoE text
# model (Qwen3_5MoeForCausalLM).
TEXT_TYPES = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")

# Keys every released Qwen3.5 text config carries (Qwen3.5-27B / 35B-A3B / Qwen3.6 config.json),
# at the values they all share; each case sets its dimensions on top.
RELEASED = dict(attention_bias=False, attention_dropout=0.0, attn_output_gate=True, hidden_act="silu",
                initializer_range=0.02, mamba_ssm_dtype="float32", max_position_embeddings=512,
                mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, pad_token_id=None,
                rms_norm_eps=1e-6, use_cache=True, vocab_size=300, hidden_size=64, eos_token_id=2)


# Keys the released Qwen3-Next config.json files carry (Qwen3-Next-80B-A3B, transformers 4.57),
# at the values they share; partial_rotary_factor and rope_theta at the top level.
NEXT_RELEASED = dict(attention_bias=False, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, hidden_act="silu",
                     initializer_range=0.02, max_position_embeddings=512, output_router_logits=False,
                     rms_norm_eps=1e-6, rope_scaling=None, use_cache=True, use_sliding_window=False, vocab_size=300,
                     hidden_size=64)


def next_type(cfg):
    return cfg["model_type"] == "qwen3_next"


def text_config(case):
    """The text model's config.json (flat), from a case's keys: RELEASED (NEXT_RELEASED), then the
    case; Qwen3.5's partial_rotary_factor written both at the top and in rope_parameters as its
    releases do."""
    cfg = dict(NEXT_RELEASED if next_type(case) else RELEASED)
    cfg.update({k: v for k, v in case.items() if not k.startswith("_")})
    if not next_type(cfg):
        rope = cfg.setdefault("rope_parameters", {})
        if "partial_rotary_factor" in rope:
            cfg["partial_rotary_factor"] = rope["partial_rotary_factor"]
    return dict(sorted(cfg.items()))


def layer_types(cfg):
    """Qwen3_5TextConfig: layer_types when given, else every full_attention_interval-th (4)
    layer full attention, the rest linear attention."""
    if cfg.get("layer_types") is not None:
        return list(cfg["layer_types"])
    n = cfg.get("full_attention_interval", 4)
    return ["linear_attention" if (i + 1) % n else "full_attention" for i in range(cfg["num_hidden_layers"])]


def dims(cfg):
    """Shape facts with Qwen3_5TextConfig's (Qwen3NextConfig's) defaults."""
    return dict(H=cfg["hidden_size"], V=cfg["vocab_size"], nh=cfg.get("num_attention_heads", 16),
                nkv=cfg.get("num_key_value_heads", 2 if next_type(cfg) else 4), d=cfg.get("head_dim", 256),
                Hk=cfg.get("linear_num_key_heads", 16), Hv=cfg.get("linear_num_value_heads", 32),
                Dk=cfg.get("linear_key_head_dim", 128), Dv=cfg.get("linear_value_head_dim", 128),
                K=cfg.get("linear_conv_kernel_dim", 4))


def rotary_dim(cfg):
    """head_dim * partial_rotary_factor (rope_parameters' value, else the top-level one, else
    Qwen3_5TextConfig's default 0.25)."""
    rope = cfg.get("rope_parameters") or {}
    factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    return int(dims(cfg)["d"] * factor)


def moe(cfg):
    return cfg["model_type"] in ("qwen3_5_moe_text", "qwen3_next")


def moe_layout(cfg):
    """(experts, k, expert intermediate): Qwen3_5MoeTextConfig's (Qwen3NextConfig's) defaults."""
    if next_type(cfg):
        return cfg.get("num_experts", 512), cfg.get("num_experts_per_tok", 10), cfg.get("moe_intermediate_size", 512)
    return cfg.get("num_experts", 256), cfg.get("num_experts_per_tok", 8), cfg.get("moe_intermediate_size", 512)


def sparse_layers(cfg):
    """Per layer whether its MLP is the sparse block: every layer of Qwen3.5-MoE, none of dense
    Qwen3.5; Qwen3NextDecoderLayer's rule for Qwen3-Next."""
    L = cfg["num_hidden_layers"]
    if not next_type(cfg):
        return [moe(cfg)] * L
    E = moe_layout(cfg)[0]
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step", 1)
    return [i not in only and E > 0 and (i + 1) % step == 0 for i in range(L)]


def renormalise(cfg):
    """Qwen3.5-MoE's router always renormalises its top k; Qwen3-Next's under norm_topk_prob."""
    return cfg.get("norm_topk_prob", True) if next_type(cfg) else True


def dense_intermediate(cfg):
    return cfg.get("intermediate_size", 5632 if next_type(cfg) else 12288)


def tied(cfg):
    return cfg.get("tie_word_embeddings", False)


def tensor_shapes(cfg):
    """Names and shapes as Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM save them (the Hub's
    stacked expert layout: mlp.experts.gate_up_proj [E, 2 I, H] with the gate rows first,
    mlp.experts.down_proj [E, H, I], no `.weight` suffix), and as the released Qwen3-Next
    checkpoints hold them (fused in_proj_qkvz / in_proj_ba, one module per expert)."""
    x = dims(cfg)
    H, V, nh, nkv, d = x["H"], x["V"], x["nh"], x["nkv"], x["d"]
    key, value = x["Hk"] * x["Dk"], x["Hv"] * x["Dv"]
    out = [("model.embed_tokens.weight", (V, H))]
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        if kind == "linear_attention":
            if next_type(cfg):
                out += [(p + "linear_attn.in_proj_qkvz.weight", (2 * key + 2 * value, H)),
                        (p + "linear_attn.in_proj_ba.weight", (2 * x["Hv"], H))]
            else:
                out += [(p + "linear_attn.in_proj_qkv.weight", (2 * key + value, H)),
                        (p + "linear_attn.in_proj_z.weight", (value, H)),
                        (p + "linear_attn.in_proj_b.weight", (x["Hv"], H)),
                        (p + "linear_attn.in_proj_a.weight", (x["Hv"], H))]
            out += [(p + "linear_attn.conv1d.weight", (2 * key + value, 1, x["K"])),
                    (p + "linear_attn.dt_bias", (x["Hv"],)),
                    (p + "linear_attn.A_log", (x["Hv"],)),
                    (p + "linear_attn.norm.weight", (x["Dv"],)),
                    (p + "linear_attn.out_proj.weight", (H, value))]
        elif kind == "full_attention":
            out += [(p + "self_attn.q_proj.weight", (nh * d * 2, H)), (p + "self_attn.k_proj.weight", (nkv * d, H)),
                    (p + "self_attn.v_proj.weight", (nkv * d, H)), (p + "self_attn.o_proj.weight", (H, nh * d)),
                    (p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
        else:
            raise ValueError(f"layer {i}: unknown layer type {kind!r}")
        if sparse_layers(cfg)[i]:
            E, _, I = moe_layout(cfg)
            S = cfg.get("shared_expert_intermediate_size", 512)
            out += [(p + "mlp.gate.weight", (E, H))]
            if next_type(cfg):
                for e in range(E):
                    out += [(p + f"mlp.experts.{e}.gate_proj.weight", (I, H)), (p + f"mlp.experts.{e}.up_proj.weight", (I, H)),
                            (p + f"mlp.experts.{e}.down_proj.weight", (H, I))]
            else:
                out += [(p + "mlp.experts.gate_up_proj", (E, 2 * I, H)), (p + "mlp.experts.down_proj", (E, H, I))]
            out += [(p + "mlp.shared_expert.gate_proj.weight", (S, H)), (p + "mlp.shared_expert.up_proj.weight", (S, H)),
                    (p + "mlp.shared_expert.down_proj.weight", (H, S)), (p + "mlp.shared_expert_gate.weight", (1, H))]
        else:
            I = dense_intermediate(cfg)
            out += [(p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                    (p + "mlp.down_proj.weight", (H, I))]
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
    out += [("model.norm.weight", (H,))]
    if not tied(cfg):
        out += [("lm_head.weight", (V, H))]
    return out


def random_weights(cfg, gen, dtype):
    """Random weights, rounded to the storage dtype. The (1 + w) norms get small nonzero w (so
    the offset matters); the gated norm's plain weight sits near 1. A_log spans decays from
    nearly none (A = 0.02: exp(g) ~ 0.97, a long memory across chunks) to fast (A = 4);
    dt_bias near 1 as transformers initialises it."""
    weights = {}
    for name, shape in tensor_shapes(cfg):
        if name.endswith("linear_attn.norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("norm.weight"):
            t = 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("A_log"):
            t = math.log(0.02) + (math.log(4.0) - math.log(0.02)) * torch.rand(shape, generator=gen)
        elif name.endswith("dt_bias"):
            t = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith("conv1d.weight"):
            t = 0.4 * torch.randn(shape, generator=gen)
        else:
            t = 0.125 * torch.randn(shape, generator=gen)
        weights[name] = t.to(dtype)
    return weights


def rms_1p(x, w, eps):
    """Qwen3_5RMSNorm: x / rms(x) * (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def gated_rms(x, z, w, eps):
    """Qwen3_5RMSNormGated: x / rms(x) * w * silu(z), per value head."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w * torch.nn.functional.silu(z)


def l2_normalise(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def causal_depthwise_conv(x, w):
    """x [T, C], w [C, 1, K]: y[t, c] = sum_j w[c, 0, j] x[t - (K - 1) + j, c] (zeros before the
    start), as nn.Conv1d(groups=C, padding=K-1) truncated to the first T outputs."""
    T, K = x.shape[0], w.shape[-1]
    padded = torch.cat((x.new_zeros(K - 1, x.shape[1]), x))
    return sum(w[:, 0, j] * padded[j:j + T] for j in range(K))


def delta_rule(q, k, v, g, beta):
    """The gated delta rule token by token. q, k [T, Hv, Dk] (already repeated to the value
    heads), v [T, Hv, Dv], g, beta [T, Hv] -> o [T, Hv, Dv]."""
    T, Hv, Dk = k.shape
    S = v.new_zeros(Hv, Dk, v.shape[-1])
    out = []
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        predicted = torch.einsum("hkv,hk->hv", S, k[t])             # S^T k
        delta = beta[t][:, None] * (v[t] - predicted)
        S = S + k[t][:, :, None] * delta[:, None, :]                  # + k delta^T
        out.append(torch.einsum("hkv,hk->hv", S, q[t]))              # S^T q
    return torch.stack(out)


def projections(cfg, W, p, h):
    """The mixer's inputs: the convolution's channels [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)] [T, C],
    z [T, Hv, Dv], b and a [T, Hv]. Qwen3.5 has a projection for each; Qwen3-Next fuses them,
    its rows per key head (fix_query_key_value_ordering), and concatenates q, k, v per kind."""
    x = dims(cfg)
    T = h.shape[0]
    Hk, Hv, Dk, Dv = x["Hk"], x["Hv"], x["Dk"], x["Dv"]
    if not next_type(cfg):
        return (h @ W[p + "in_proj_qkv.weight"].T, (h @ W[p + "in_proj_z.weight"].T).reshape(T, Hv, Dv),
                h @ W[p + "in_proj_b.weight"].T, h @ W[p + "in_proj_a.weight"].T)
    r = Hv // Hk
    qkvz = (h @ W[p + "in_proj_qkvz.weight"].T).reshape(T, Hk, 2 * Dk + 2 * r * Dv)
    ba = (h @ W[p + "in_proj_ba.weight"].T).reshape(T, Hk, 2 * r)
    q, k, v, z = qkvz.split([Dk, Dk, r * Dv, r * Dv], dim=-1)
    b, a = ba.split([r, r], dim=-1)
    mixed = torch.cat((q.reshape(T, Hk * Dk), k.reshape(T, Hk * Dk), v.reshape(T, Hv * Dv)), dim=-1)
    return mixed, z.reshape(T, Hv, Dv), b.reshape(T, Hv), a.reshape(T, Hv)


def gated_deltanet(cfg, W, p, h):
    """One linear-attention mixer. h [T, H] -> [T, H]."""
    x = dims(cfg)
    T = h.shape[0]
    Hk, Hv, Dk, Dv = x["Hk"], x["Hv"], x["Dk"], x["Dv"]
    mixed, z, b, a = projections(cfg, W, p, h)
    mixed = torch.nn.functional.silu(causal_depthwise_conv(mixed, W[p + "conv1d.weight"]))
    q, k, v = mixed.split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    q, k, v = q.reshape(T, Hk, Dk), k.reshape(T, Hk, Dk), v.reshape(T, Hv, Dv)
    beta = torch.sigmoid(b)                                                          # [T, Hv]
    g = -torch.exp(W[p + "A_log"]) * torch.nn.functional.softplus(a + W[p + "dt_bias"])  # [T, Hv], <= 0
    q = l2_normalise(q) * Dk ** -0.5
    k = l2_normalise(k)
    q = q.repeat_interleave(Hv // Hk, dim=1)                   # value head j reads q/k head j // (Hv / Hk)
    k = k.repeat_interleave(Hv // Hk, dim=1)
    o = delta_rule(q, k, v, g, beta)
    o = gated_rms(o, z, W[p + "norm.weight"], cfg.get("rms_norm_eps", 1e-6))
    return o.reshape(T, Hv * Dv) @ W[p + "out_proj.weight"].T


def rope_tables(cfg, T, dtype):
    """cos, sin [T, rotary_dim] computed in fp32 as transformers does (autocast off), then cast."""
    r = rotary_dim(cfg)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def gated_attention(cfg, W, p, h, cos, sin):
    """One full-attention mixer. h [T, H] -> [T, H]."""
    x = dims(cfg)
    T, nh, nkv, d = h.shape[0], x["nh"], x["nkv"], x["d"]
    eps = cfg.get("rms_norm_eps", 1e-6)
    qg = (h @ W[p + "q_proj.weight"].T).reshape(T, nh, 2 * d)
    q, gate = qg[..., :d], qg[..., d:].reshape(T, nh * d)           # per head [query | gate]
    q = rms_1p(q, W[p + "q_norm.weight"], eps).transpose(0, 1)      # [nh, T, d]
    k = rms_1p((h @ W[p + "k_proj.weight"].T).reshape(T, nkv, d), W[p + "k_norm.weight"], eps).transpose(0, 1)
    v = (h @ W[p + "v_proj.weight"].T).reshape(T, nkv, d).transpose(0, 1)
    r = cos.shape[-1]

    def rope(t):
        rot, rest = t[..., :r], t[..., r:]
        half = torch.cat((-rot[..., r // 2:], rot[..., :r // 2]), dim=-1)
        return torch.cat((rot * cos + half * sin, rest), dim=-1)
    q, k = rope(q), rope(k)
    k = k.repeat_interleave(nh // nkv, dim=0)
    v = v.repeat_interleave(nh // nkv, dim=0)
    s = (q @ k.transpose(1, 2)) * d ** -0.5
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    a = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, nh * d)
    return (a * torch.sigmoid(gate)) @ W[p + "o_proj.weight"].T


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def expert(W, p, e, I):
    """Expert e's (gate, up, down) from the stacked tensors or its own module."""
    if p + "mlp.experts.gate_up_proj" in W:
        gate_up, down = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.down_proj"]
        return gate_up[e, :I], gate_up[e, I:], down[e]
    m = p + f"mlp.experts.{e}."
    return W[m + "gate_proj.weight"], W[m + "up_proj.weight"], W[m + "down_proj.weight"]


def sparse_moe(cfg, W, p, h, stats):
    """Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock: softmax router, top-k, renormalised
    (Qwen3-Next: under norm_topk_prob); each expert's SwiGLU; plus sigmoid(shared_expert_gate h)
    times the shared expert."""
    E, k, I = moe_layout(cfg)
    logits = h @ W[p + "mlp.gate.weight"].T
    probs = torch.softmax(logits, dim=-1)
    top, idx = torch.topk(probs, k, dim=-1)
    if stats is not None:
        ranked = probs.sort(dim=-1, descending=True).values
        if k < E:
            stats["route_margin"] = min(stats.get("route_margin", 1.0), (ranked[:, k - 1] - ranked[:, k]).min().item())
        stats.setdefault("router_logits", []).append(logits)
    if renormalise(cfg):
        top = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        rows, slot = torch.where(idx == e)
        if rows.numel() == 0:
            continue
        y = swiglu(h[rows], *expert(W, p, e, I))
        out = out.index_add(0, rows, y * top[rows, slot, None])
    s = p + "mlp.shared_expert."
    shared = swiglu(h, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"])
    return out + torch.sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].T) * shared


def forward(cfg, w, ids, dtype=torch.float64, stats=None):
    """Logits [T, V] in `dtype` for one sequence starting at position 0. `stats` (MoE) receives
    the smallest k-th/(k+1)-th router probability gap and each layer's router logits. Runs on one
    intra-op thread: the per-token recurrence is thousands of tiny ops, for which more threads only
    add synchronisation (on shared cores, 0.2 s of CPU became minutes of spinning)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _forward(cfg, w, ids, dtype, stats)
    finally:
        torch.set_num_threads(threads)


def _forward(cfg, w, ids, dtype, stats):
    W = {n: t.to(dtype) for n, t in w.items()}
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    cos, sin = rope_tables(cfg, T, dtype)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    sparse = sparse_layers(cfg)
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        h = rms_1p(x, W[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            x = x + gated_deltanet(cfg, W, p + "linear_attn.", h)
        else:
            x = x + gated_attention(cfg, W, p + "self_attn.", h, cos, sin)
        h = rms_1p(x, W[p + "post_attention_layernorm.weight"], eps)
        if sparse[i]:
            x = x + sparse_moe(cfg, W, p, h, stats)
        else:
            x = x + swiglu(h, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
    x = rms_1p(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if tied(cfg) else W["lm_head.weight"]
    return x @ head.T


def wrap(cfg, weights):
    """The checkpoint as Qwen3_5ForConditionalGeneration (Qwen3_5MoeForConditionalGeneration)
    saves it: config.json with the text
    config under text_config (dtype and tie_word_embeddings at both levels, as released), a
    vision_config, the multimodal token ids; the text tensors under model.language_model., the
    head (when untied) as lm_head.weight, and tensors ctune must ignore: two of the vision
    tower's (model.visual.) and two of the multi-token-prediction head's (mtp.)."""
    H = cfg["hidden_size"]
    text = dict(cfg)
    wrapper = "qwen3_5_moe" if moe(cfg) else "qwen3_5"
    architecture = "Qwen3_5MoeForConditionalGeneration" if moe(cfg) else "Qwen3_5ForConditionalGeneration"
    outer = {"architectures": [architecture], "dtype": cfg["dtype"], "image_token_id": 296,
             "language_model_only": False, "model_type": wrapper, "text_config": text,
             "tie_word_embeddings": tied(cfg), "transformers_version": "5.2.0", "video_token_id": 297,
             "vision_config": {"deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh",
                               "hidden_size": 16, "in_channels": 3, "initializer_range": 0.02,
                               "intermediate_size": 32, "model_type": wrapper, "num_heads": 2,
                               "num_position_embeddings": 16, "out_hidden_size": H, "patch_size": 2,
                               "spatial_merge_size": 2, "temporal_patch_size": 2},
             "vision_end_token_id": 295, "vision_start_token_id": 294}
    out = {}
    for name, t in weights.items():
        out[name if name == "lm_head.weight" else "model.language_model." + name[len("model."):]] = t
    some = next(iter(weights.values()))
    out["model.visual.patch_embed.proj.weight"] = torch.zeros(16, 3, 2, 2, 2, dtype=some.dtype)
    out["model.visual.merger.linear_fc2.weight"] = torch.zeros(H, 64, dtype=some.dtype)
    out["mtp.fc.weight"] = torch.zeros(H, 2 * H, dtype=some.dtype)
    out["mtp.norm.weight"] = torch.zeros(H, dtype=some.dtype)
    return outer, out


def packing_reference(cfg, weights, ids, split, fp32_noise, max_abs):
    """Two documents, ids[:split] and ids[split:], each scored alone from position 0: the per-token
    NLL a packed row (both documents, positions and every layer's state restarting at the
    boundary) must reproduce, with the float32 noise of those NLLs."""
    docs = [ids[:split], ids[split:]]

    def nll_of(t):
        out = {}
        for n, doc in enumerate(docs):
            lp = torch.log_softmax(forward(cfg, t, doc, torch.get_default_dtype()), dim=-1)
            out[f"nll{n}"] = -lp[torch.arange(len(doc) - 1), torch.tensor(doc[1:])]
        return out
    w64 = {k: v.to(torch.float64) for k, v in weights.items()}
    exact = nll_of_64(nll_of, w64)
    noise = fp32_noise(nll_of, w64, max_abs)
    return {"ids": ids, "lengths": [len(d) for d in docs],
            "documents": [{"ids": d, "nll": exact[f"nll{n}"].tolist()} for n, d in enumerate(docs)],
            "nll_fp32_noise": max(noise.values())}


def nll_of_64(compute, w64):
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return compute(w64)
    finally:
        torch.set_default_dtype(saved)
