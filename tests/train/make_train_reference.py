#!/usr/bin/env python3
"""Independent reference for ctune's training step, written directly against PyTorch
(python3-torch from Debian) and sharing no code with ctune.

For a tiny Llama-shaped model (GQA, untied head) and fixed batches (padding, masked prompt
tokens, and a packed row holding two documents with restarted positions), it writes:
  model/                       config.json + model.safetensors (the base weights)
  lora.safetensors             LoRA A/B for all 8 target layers (B non-zero so every gradient is)
  batches.json                 the micro-batches (ids, labels, positions, segments)
  grads_full.safetensors       d(loss)/d(param) for full fine-tuning, loss = sum CE / targets
  grads_lora.safetensors       d(loss)/d(A, B) for LoRA (r=4, alpha=8) on a frozen base
  grads_rslora.safetensors     the same with rsLoRA's scale alpha/sqrt(r)
  trajectory.json              10 AdamW steps (cosine, warmup, weight decay with no-decay
                               groups, clipping, grad accumulation 2): loss per step
  noise.json                   how far float32 rounding alone moves each of these values
                               (tests/fp32_noise.py): the scale of the tests' tolerances
Gradients and the trajectory are computed in float64 (the weights are exact in fp32).

With FAMILY qwen3 (modeling_qwen3.py), the same model with Qwen3's per-head q_norm/k_norm
(RMSNorm over head_dim before RoPE) and head_dim 16 != hidden / heads: the model, LoRA weights,
batches, the full and LoRA gradients and their noise (no trajectories).
With FAMILY gemma2 (modeling_gemma2.py): (1 + w) norms, sandwich norms, sqrt(H)-scaled
embeddings, GeGLU, query_pre_attn_scalar, attention and final soft-caps small enough to bend
(2 and 3), a window of 8 on layer 0. With FAMILY gemma3 (modeling_gemma3.py): Gemma 2's body
without caps, (1 + w) q/k norms, layer 0 local (window 8, RoPE theta 10000), layer 1 global
(theta 1e6). With FAMILY phi3 (modeling_phi3.py): fused qkv_proj and gate_up_proj (LoRA on the
fused layers, as PEFT targets them), half of each head rotating, longrope past an original
context of 16 (these 24-token rows use the long factors and the attention factor). The same
outputs as for qwen3. With FAMILY qwen3_moe / mixtral (modeling_qwen3_moe.py, modeling_mixtral.py):
every layer a sparse block (8 experts, 3 per token, not renormalised / 4 experts, 2 per token,
renormalised), the loss plus 0.1 times transformers' load_balancing_loss_func over the tokens
the CE counts, each micro-batch weighted by its share of the targets; LoRA on the attention and
every expert's projections (the routers frozen). The same outputs as for qwen3.

Usage: make_train_reference.py OUT_DIR [FAMILY]
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fp32_noise import fp32_noise, relative_norm  # noqa: E402

torch.set_default_dtype(torch.float64)
CFG = dict(model_type="llama", vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
           max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="float32", hidden_act="silu")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head",
           "qkv_proj", "gate_up_proj", "w1", "w2", "w3"]
RANK, ALPHA = 4, 8.0
AUX_COEF = 0.1          # moe.aux_loss_coef of the MoE cases (large, so its gradient matters)
Z_COEF = 0.05           # moe.router_z_loss_coef of the MoE cases (written to trajectory.json)
ROUTE_MARGINS = []      # the smallest k-th/(k+1)-th router probability gap of each MoE forward
IGNORE = -100


def head_dim():
    return CFG.get("head_dim") or CFG["hidden_size"] // CFG["num_attention_heads"]


def moe():
    """(experts, k, expert intermediate, renormalise, module, (gate, up, down) names) of a
    Mixtral / Qwen3-MoE configuration (every layer sparse here), else None."""
    if CFG["model_type"] == "mixtral":
        return CFG["num_local_experts"], CFG["num_experts_per_tok"], CFG["intermediate_size"], True, "block_sparse_moe", ("w1", "w3", "w2")
    if CFG["model_type"] == "qwen3_moe":
        return (CFG["num_experts"], CFG["num_experts_per_tok"], CFG["moe_intermediate_size"], CFG["norm_topk_prob"], "mlp",
                ("gate_proj", "up_proj", "down_proj"))
    return None


def shapes():
    H, I, V, nh, nkv = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    d = head_dim()
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(CFG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if moe():
            E, _, Ie, _, module, names = moe()
            out += [(p + "self_attn.q_proj.weight", (nh * d, H)), (p + "self_attn.k_proj.weight", (nkv * d, H)),
                    (p + "self_attn.v_proj.weight", (nkv * d, H)), (p + "self_attn.o_proj.weight", (H, nh * d)),
                    (p + f"{module}.gate.weight", (E, H))]
            for e in range(E):
                out += [(p + f"{module}.experts.{e}.{n}.weight", s) for n, s in zip(names, ((Ie, H), (Ie, H), (H, Ie)))]
            out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
            if CFG["model_type"] == "qwen3_moe":
                out += [(p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
            continue
        if CFG["model_type"] == "phi3":
            out += [(p + "self_attn.qkv_proj.weight", ((nh + 2 * nkv) * d, H)), (p + "self_attn.o_proj.weight", (H, nh * d)),
                    (p + "mlp.gate_up_proj.weight", (2 * I, H)), (p + "mlp.down_proj.weight", (H, I)),
                    (p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
            continue
        out += [(p + "self_attn.q_proj.weight", (nh * d, H)), (p + "self_attn.k_proj.weight", (nkv * d, H)),
                (p + "self_attn.v_proj.weight", (nkv * d, H)), (p + "self_attn.o_proj.weight", (H, nh * d)),
                (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                (p + "mlp.down_proj.weight", (H, I)),
                (p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        if CFG["model_type"] in ("qwen3", "gemma3_text"):
            out += [(p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
        if gemma():
            out += [(p + "pre_feedforward_layernorm.weight", (H,)), (p + "post_feedforward_layernorm.weight", (H,))]
    out += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make_batches(gen):
    """Four micro-batches of 2 rows x 24 tokens."""
    V, T = CFG["vocab_size"], 24
    batches = []
    for b in range(4):
        ids = torch.randint(0, V, (2, T), generator=gen)
        labels = ids.clone()
        pos = torch.arange(T).repeat(2, 1)
        seg = torch.ones(2, T, dtype=torch.long)
        # Row 0: a prompt of 5 + b tokens that is not trained, and right padding of 3 + b.
        labels[0, : 5 + b] = IGNORE
        pad = 3 + b
        ids[0, T - pad:] = 0
        labels[0, T - pad:] = IGNORE
        seg[0, T - pad:] = 0
        # Row 1: two packed documents (positions restart, attention stays inside each).
        cut = 10 + b
        pos[1, cut:] = torch.arange(T - cut)
        seg[1, cut:] = 2
        labels[1, 0] = IGNORE
        labels[1, cut] = IGNORE  # a document's first token is never a target
        batches.append(dict(ids=ids, labels=labels, pos=pos, seg=seg))
    return batches


def gemma():
    return CFG["model_type"] in ("gemma2", "gemma3_text")


def inv_freq(theta=None, long=False):
    d = int(head_dim() * CFG.get("partial_rotary_factor", 1.0))  # Phi3: the leading dimensions rotate
    base = 1.0 / ((theta or CFG["rope_theta"]) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = CFG.get("rope_scaling") or {}
    if scaling.get("type") == "longrope":  # _compute_longrope_parameters
        ext = torch.tensor(scaling["long_factor" if long else "short_factor"], dtype=torch.float32)
        return 1.0 / (ext * (theta or CFG["rope_theta"]) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    return base


def cap(x, c):
    return x if c is None else c * torch.tanh(x / c)


def sparse_moe(h, p, lin, stats):
    """Mixtral / Qwen3MoeSparseMoeBlock: softmax router, top-k (renormalised as the family says),
    then transformers' loop over the experts, each taking its rows (torch.where on the one-hot
    mask) and adding its weighted output back with index_add_. Router logits go to `stats`."""
    E, k, _, renorm, module, (g, u, d) = moe()
    B, T, H = h.shape
    x = h.reshape(-1, H)
    logits = lin(x, p + f"{module}.gate")
    stats.setdefault("router_logits", []).append(logits)
    probs = torch.softmax(logits, dim=-1)
    top, idx = torch.topk(probs, k, dim=-1)
    ranked = probs.detach().sort(dim=-1, descending=True).values
    stats["route_margin"] = min(stats.get("route_margin", 1.0), (ranked[:, k - 1] - ranked[:, k]).min().item())
    if renorm:
        top = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(idx, num_classes=E).permute(2, 1, 0)
    for e in range(E):
        slot, rows = torch.where(mask[e])
        if rows.numel() == 0:
            continue
        ex = p + f"{module}.experts.{e}."
        r = x[rows]
        y = lin(torch.nn.functional.silu(lin(r, ex + g)) * lin(r, ex + u), ex + d)
        out = out.index_add(0, rows, y * top[rows, slot, None])
    return out.reshape(B, T, H)


def load_balancing_loss(gate_logits, mask):
    """transformers' load_balancing_loss_func with an attention mask [B, T]: over every sparse
    layer's router logits at once, the masked fraction of tokens per expert and top-k slot times
    the masked mean router probability, summed, times the expert count."""
    E, k = moe()[0], moe()[1]
    logits = torch.cat(gate_logits, dim=0)
    probs = torch.softmax(logits, dim=-1)
    _, chosen = torch.topk(probs, k, dim=-1)
    expert_mask = torch.nn.functional.one_hot(chosen, E).to(probs.dtype)
    m = mask.reshape(-1).to(probs.dtype).repeat(len(gate_logits))
    tokens_per_expert = (expert_mask * m[:, None, None]).sum(0) / m.sum()
    prob_per_expert = (probs * m[:, None]).sum(0) / m.sum()
    return (tokens_per_expert * prob_per_expert[None]).sum() * E


def router_z_loss(gate_logits, mask):
    """transformers' router_z_loss_func (Switch Transformers, ST-MoE): the mean over tokens of
    logsumexp(router logits)^2; here over every sparse layer's logits at once and, as the
    load-balancing loss, over the tokens the CE counts (transformers' takes every token)."""
    logits = torch.cat(gate_logits, dim=0)
    m = mask.reshape(-1).to(logits.dtype).repeat(len(gate_logits))
    return (torch.logsumexp(logits, dim=-1) ** 2 * m).sum() / m.sum()


def forward_logits(W, lora, scale, batch, stats=None):
    """Logits [B, T, V] of the model with weights W (and LoRA A/B scaled by `scale`); with MoE
    layers `stats` receives the router logits and the smallest routing gap."""
    H, nh, nkv = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    d, eps = head_dim(), CFG["rms_norm_eps"]
    ids, pos, seg = batch["ids"], batch["pos"], batch["seg"]
    B, T = ids.shape

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        key = name + ".lora_A.weight"
        if lora is not None and key in lora:
            y = y + scale * ((x @ lora[key].T) @ lora[name + ".lora_B.weight"].T)
        return y

    def rms(x, w):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return n * (1.0 + w) if gemma() else w * n

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), -1)

    def rope(x, cos, sin):  # the leading cos.shape[-1] dimensions rotate (partial rotary), the rest pass
        r = cos.shape[-1]
        return torch.cat((x[..., :r] * cos + rot(x[..., :r]) * sin, x[..., r:]), -1)

    # longrope: long factors once the largest position reaches the original context; cos and
    # sin times sqrt(1 + ln(max / original) / ln original).
    scaling = CFG.get("rope_scaling") or {}
    long, attn_factor = False, 1.0
    if scaling.get("type") == "longrope":
        original = CFG["original_max_position_embeddings"]
        long = int(pos.max()) + 1 > original
        factor = CFG["max_position_embeddings"] / original
        attn_factor = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0

    dtype = W["model.embed_tokens.weight"].dtype                     # float64, or float32 for the noise runs

    def cos_sin(inv):
        freqs = pos.to(torch.float32)[..., None] * inv               # fp32 like HF
        emb = torch.cat((freqs, freqs), -1)
        return (emb.cos() * attn_factor).to(dtype)[:, None], (emb.sin() * attn_factor).to(dtype)[:, None]   # [B,1,T,r]
    i_idx, j_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j_idx <= i_idx)[None] & (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0)
    attn_scale = CFG["query_pre_attn_scalar"] ** -0.5 if gemma() else 1 / math.sqrt(d)
    x = W["model.embed_tokens.weight"][ids]
    if gemma():
        x = x * H ** 0.5
    for i in range(CFG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        local = CFG.get("_local", [False] * CFG["num_hidden_layers"])[i]
        cos, sin = cos_sin(inv_freq(CFG["rope_local_base_freq"] if local else None, long=long))
        window = CFG.get("_windows", [None] * CFG["num_hidden_layers"])[i]
        ok = allowed if window is None else allowed & (i_idx - j_idx < window)[None]
        h = rms(x, W[p + "input_layernorm.weight"])
        if p + "self_attn.qkv_proj.weight" in W:  # Phi3: [q; k; v] rows
            q, k, v = lin(h, p + "self_attn.qkv_proj").split([nh * d, nkv * d, nkv * d], -1)
        else:
            q, k, v = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
        q = q.reshape(B, T, nh, d).transpose(1, 2)
        k = k.reshape(B, T, nkv, d).transpose(1, 2)
        v = v.reshape(B, T, nkv, d).transpose(1, 2)
        if p + "self_attn.q_norm.weight" in W:  # Qwen3: each head over d, before RoPE
            q, k = rms(q, W[p + "self_attn.q_norm.weight"]), rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        s = cap((q @ k.transpose(-1, -2)) * attn_scale, CFG.get("attn_logit_softcapping"))
        s = s.masked_fill(~ok[:, None], torch.finfo(s.dtype).min)
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, nh * d)
        if gemma():  # sandwich norms, GeGLU
            x = x + rms(lin(a, p + "self_attn.o_proj"), W[p + "post_attention_layernorm.weight"])
            h = rms(x, W[p + "pre_feedforward_layernorm.weight"])
            g = torch.nn.functional.gelu(lin(h, p + "mlp.gate_proj"), approximate="tanh")
            x = x + rms(lin(g * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj"), W[p + "post_feedforward_layernorm.weight"])
            continue
        x = x + lin(a, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        if moe():
            x = x + sparse_moe(h, p, lin, stats if stats is not None else {})
            continue
        if p + "mlp.gate_up_proj.weight" in W:  # Phi3: [gate; up] rows
            g, u = lin(h, p + "mlp.gate_up_proj").chunk(2, -1)
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"])
    return cap(lin(x, "lm_head"), CFG.get("final_logit_softcapping"))


def forward_loss(W, lora, scale, batch, stats=None):
    """Summed next-token CE over targeted positions, and the target count."""
    labels = batch["labels"]
    logits = forward_logits(W, lora, scale, batch, stats)[:, :-1].reshape(-1, CFG["vocab_size"])
    targets = labels[:, 1:].reshape(-1)
    loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum")
    return loss, int((targets != IGNORE).sum())


def step_loss(W, lora, scale, micro):
    """Token-correct accumulation: sum of token losses over micro-batches / total targets. With
    experts, plus AUX_COEF times each micro-batch's load-balancing loss and Z_COEF times its router
    z-loss, weighted by its share of the targets, over the tokens the CE counts (position t when
    label t + 1 is a target)."""
    total = sum(int((m["labels"][:, 1:] != IGNORE).sum()) for m in micro)
    out = 0
    for m in micro:
        stats = {}
        loss, targets = forward_loss(W, lora, scale, m, stats)
        out = out + loss / total
        if moe():
            counts = torch.cat((m["labels"][:, 1:] != IGNORE, torch.zeros(m["labels"].shape[0], 1, dtype=torch.bool)), 1)
            out = out + (targets / total) * (AUX_COEF * load_balancing_loss(stats["router_logits"], counts) +
                                             Z_COEF * router_z_loss(stats["router_logits"], counts))
            ROUTE_MARGINS.append(stats["route_margin"])
    return out


def grads(loss, tensors):
    g = torch.autograd.grad(loss, list(tensors.values()))
    return {k: v for k, v in zip(tensors.keys(), g)}


def lr_lambda(step, warmup, total):
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def full_step(W, micro):
    """Loss and d(loss)/d(W) of one accumulated step of full fine-tuning."""
    Wg = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    loss = step_loss(Wg, None, 0.0, micro)
    return loss, grads(loss, Wg)


def lora_step(W, lora, scale, micro):
    """Loss and d(loss)/d(A, B) of one accumulated step of LoRA on the frozen base W."""
    Lg = {k: v.clone().requires_grad_(True) for k, v in lora.items()}
    loss = step_loss(W, Lg, scale, micro)
    return loss, grads(loss, Lg)


def adamw_trajectory(W, batches):
    """10 AdamW steps of full fine-tuning: lr 1e-2, warmup 2, cosine over 10, weight decay 0.1
    except on 1-D tensors, clip 1.0, accumulation 2 cycling over the four micro-batches.
    Returns the loss, the gradient norm before clipping and the lr of every step."""
    params = {k: torch.nn.Parameter(v.clone()) for k, v in W.items()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(s, 2, 10))
    losses, norms, lrs = [], [], []
    for step in range(10):
        micro = [batches[(2 * step) % 4], batches[(2 * step + 1) % 4]]
        opt.zero_grad()
        loss = step_loss(params, None, 0.0, micro)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0).item())
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses, norms, lrs


def sgd_trajectory(W, batches):
    """6 SGD steps (momentum 0.9, coupled weight decay 0.01 on >= 2-D tensors, constant lr 0.05
    after 1 warmup step, no clipping, one micro-batch per step): the loss of every step."""
    params = {k: torch.nn.Parameter(v.clone()) for k, v in W.items()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 1 if s < 1 else 1.0)
    losses = []
    for step in range(6):
        opt.zero_grad()
        loss = step_loss(params, None, 0.0, [batches[step % 4]])
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def max_relative(a, b):
    """The largest |a - b| / |b| over the elements (the steps of a trajectory)."""
    return ((a - b).abs() / b.abs()).max().item()


def main():
    out = sys.argv[1]
    family = sys.argv[2] if len(sys.argv) > 2 else "llama"
    if family == "qwen3":
        CFG.update(model_type="qwen3", head_dim=16, attention_bias=False)
    elif family == "gemma2":
        CFG.update(model_type="gemma2", head_dim=16, query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                   final_logit_softcapping=3.0, sliding_window=8, hidden_activation="gelu_pytorch_tanh",
                   hidden_act="gelu_pytorch_tanh", _windows=[8, None])
    elif family == "gemma3":
        CFG.update(model_type="gemma3_text", head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                   sliding_window_pattern=2, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   hidden_activation="gelu_pytorch_tanh", _windows=[8, None], _local=[True, False])
    elif family == "phi3":
        CFG.update(model_type="phi3", partial_rotary_factor=0.5, max_position_embeddings=256,
                   original_max_position_embeddings=16,
                   rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2], "long_factor": [1.5, 4.0]})
    elif family == "qwen3_moe":
        CFG.update(model_type="qwen3_moe", head_dim=16, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=16,
                   norm_topk_prob=False, router_aux_loss_coef=AUX_COEF)
    elif family == "mixtral":
        CFG.update(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2, intermediate_size=24,
                   router_aux_loss_coef=AUX_COEF)
    elif family != "llama":
        raise SystemExit(f"unknown family {family}")
    os.makedirs(os.path.join(out, "model"), exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    W = {}
    for name, shape in shapes():
        offset = 0.0 if gemma() else 1.0  # Gemma's norms scale by 1 + w
        t = offset + 0.1 * torch.randn(shape, generator=gen) if name.endswith("norm.weight") else 0.2 * torch.randn(shape, generator=gen)
        W[name] = t.to(torch.float32).double()  # exact in fp32
    write_safetensors(os.path.join(out, "model", "model.safetensors"), W)
    with open(os.path.join(out, "model", "config.json"), "w") as f:
        json.dump({k: v for k, v in CFG.items() if not k.startswith("_")}, f, indent=2)

    lora = {}
    for name, shape in shapes():
        layer = name[: -len(".weight")]
        if layer.split(".")[-1] in TARGETS:
            out_f, in_f = shape
            lora[layer + ".lora_A.weight"] = (0.2 * torch.randn(RANK, in_f, generator=gen)).to(torch.float32).double()
            lora[layer + ".lora_B.weight"] = (0.2 * torch.randn(out_f, RANK, generator=gen)).to(torch.float32).double()
    write_safetensors(os.path.join(out, "lora.safetensors"), lora)

    batches = make_batches(gen)
    with open(os.path.join(out, "batches.json"), "w") as f:
        json.dump([{k: v.tolist() for k, v in b.items()} for b in batches], f)

    # Gradients for one step over micro-batches 0 and 1 (accumulation 2).
    micro = batches[:2]
    loss, g = full_step(W, micro)
    write_safetensors(os.path.join(out, "grads_full.safetensors"), g)
    info = {"full_loss": loss.item()}

    def full(t):
        loss, g = full_step(t, micro)
        return dict(g, loss=loss)
    noise = {"full": fp32_noise(full, W, relative_norm)}
    for variant, scale in (("lora", ALPHA / RANK), ("rslora", ALPHA / math.sqrt(RANK))):
        loss, g = lora_step(W, lora, scale, micro)
        write_safetensors(os.path.join(out, f"grads_{variant}.safetensors"), g)
        info[f"{variant}_loss"] = loss.item()

        def split(t, scale=scale):
            base = {k: v for k, v in t.items() if ".lora_" not in k}
            loss, g = lora_step(base, {k: v for k, v in t.items() if ".lora_" in k}, scale, micro)
            return dict(g, loss=loss)
        noise[variant] = fp32_noise(split, {**W, **lora}, relative_norm)

    if moe():
        # Routing must be decisive for float32 to route as float64 does.
        info["min_route_margin"] = min(ROUTE_MARGINS)
        info["router_z_loss_coef"] = Z_COEF
        if info["min_route_margin"] < 1e-5:
            raise SystemExit(f"{family}: a routing decision within {info['min_route_margin']:.1e} of a tie; change the seed")
    if family != "llama":
        with open(os.path.join(out, "noise.json"), "w") as f:
            json.dump(noise, f, indent=1)
        with open(os.path.join(out, "trajectory.json"), "w") as f:
            json.dump(info, f, indent=1)
        print(family, "losses", info)
        return

    losses, norms, lrs = adamw_trajectory(W, batches)
    info.update(trajectory=losses, grad_norms=norms, lrs=lrs)
    info["sgd_trajectory"] = sgd_trajectory(W, batches)

    def trajectories(t):
        losses, norms, _ = adamw_trajectory(t, batches)
        return {"trajectory": torch.tensor(losses), "grad_norms": torch.tensor(norms),
                "sgd_trajectory": torch.tensor(sgd_trajectory(t, batches))}
    noise.update(fp32_noise(trajectories, W, max_relative))
    with open(os.path.join(out, "noise.json"), "w") as f:
        json.dump(noise, f, indent=1)

    # transformers' get_linear_schedule_with_warmup(warmup=3, total=12) and
    # get_constant_schedule_with_warmup(warmup=3) factors for steps 0..13.
    info["linear_factors"] = [s / 3 if s < 3 else max(0.0, (12 - s) / (12 - 3)) for s in range(14)]
    info["constant_factors"] = [s / 3 if s < 3 else 1.0 for s in range(14)]
    info["cosine_factors"] = [lr_lambda(s, 3, 12) for s in range(14)]
    with open(os.path.join(out, "trajectory.json"), "w") as f:
        json.dump(info, f, indent=1)
    print("losses", " ".join(f"{x:.5f}" for x in losses))


if __name__ == "__main__":
    main()
