#!/usr/bin/python3
"""The PyTorch eager peer of ctune's training step, for scripts/bench.sh. Shares no code with ctune.

A Llama decoder written the way Hugging Face transformers writes it (RMSNorm in fp32, rotate-half
RoPE, repeated KV heads for GQA, materialised [B, heads, T, T] scores with a softmax in fp32,
SwiGLU, logits upcast to fp32 for the cross entropy), PEFT-style LoRA (fp32 A and B beside a
frozen base, scaling alpha / r), torch.optim.AdamW and clip_grad_norm_. Mixed precision is
torch.autocast("cpu", bfloat16), with the frozen base of a LoRA run stored in bf16 (as
`torch_dtype=torch.bfloat16` loads it) and fp32 weights for full fine-tuning. Packed rows restart
positions per document and attend within it through a block-diagonal causal mask.

The other families change the decoder as their Hugging Face modeling files do (qwen3, gemma2,
gemma3_text, phi3, smollm3; read from the config's model_type, see Family below): per-head q/k
RMSNorm (Qwen3, Gemma 3), (1 + w) norms in fp32, sandwich norms, GeGLU with tanh GELU, scaled
embeddings, query_pre_attn_scalar, soft-caps on scores and logits, sliding windows in the mask
and a local RoPE theta (Gemma), fused qkv_proj / gate_up_proj and partial rotary (Phi-3), layers
without RoPE (SmolLM3). LoRA goes on q_proj and v_proj, or on qkv_proj for Phi-3 (PEFT's names).
Mixtures of experts (qwen3_moe, mixtral) replace the MLP of their sparse layers with the sparse
block as transformers' Qwen3MoeSparseMoeBlock writes it (a softmax router in fp32, top-k, then a
loop over the experts that were hit, each taking its tokens through torch.where on a one-hot
mask and adding its weighted output back with index_add_), and add router_aux_loss_coef times
load_balancing_loss_func (output_router_logits on), as ctune adds it by default.
Qwen3.5 (qwen3_5_text) as modeling_qwen3_5.py writes it without the fla and causal-conv1d
kernels: where layer_types says linear_attention, Qwen3_5GatedDeltaNet on transformers' torch
fallbacks (F.conv1d for the causal convolution, torch_chunk_gated_delta_rule's loop over chunks
of 64: GatedDeltaNet and chunk_gated_delta_rule below); elsewhere attention whose q_proj also
emits a sigmoid output gate per head; (1 + w) norms, partial rotary. LoRA also goes on a DeltaNet
layer's in_proj_qkv and out_proj.

Modes (one JSON line on stdout each):
  bench_eager.py step --config CONFIG.json --method lora|full --precision fp32|bf16
                      --seq T --batch B --steps N [--doc-lengths FILE]
      median tokens/s over steps 2..N, system share of CPU time over them, peak resident
      bytes (VmHWM, reset after the model is built, as ctune does) and the loss of step 1.
      --objective dpo: TRL's DPOTrainer step instead (dpo_loss below) on --batch pairs, 2 x batch
      rows of T tokens; tokens/s counts both rows of a pair.
  bench_eager.py gemm --dtype fp32|bf16 [--size N]
      the best rate of an N x N x N matmul (FLOP/s): the denominator of model FLOP utilisation.
"""
import argparse
import copy
import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Family:
    """What a config's model_type changes in the decoder, per layer where it varies."""

    def __init__(self, c):
        t = c.get("model_type", "llama")
        L = c["num_hidden_layers"]
        gemma = t in ("gemma2", "gemma3_text")
        qwen35 = t == "qwen3_5_text"
        self.qk_norm = t in ("qwen3", "gemma3_text", "qwen3_5_text")
        self.gemma = gemma  # sandwich norms, GeGLU, sqrt(H) embedding scale
        self.offset_norm = gemma or qwen35  # (1 + w) norms in fp32
        self.out_gate = qwen35 and c.get("attn_output_gate", True)  # q_proj also emits a sigmoid gate per head
        # Qwen3.5: Gated DeltaNet layers where layer_types says linear_attention.
        self.linear = [kind == "linear_attention" for kind in c["layer_types"]] if qwen35 else [False] * L
        self.fused = t == "phi3"
        self.d = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        rope = c.get("rope_parameters") or {}
        self.rotary = int(self.d * rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
        self.scale = c.get("query_pre_attn_scalar", self.d) ** -0.5 if gemma else self.d ** -0.5
        self.attn_cap = c.get("attn_logit_softcapping") if t == "gemma2" else None
        self.final_cap = c.get("final_logit_softcapping") if t == "gemma2" else None
        w = c.get("sliding_window")
        if t == "gemma2":
            self.windows = [w if i % 2 == 0 else None for i in range(L)]
        elif t == "gemma3_text":
            p = c.get("sliding_window_pattern", 6)
            self.windows = [None if (i + 1) % p == 0 else w for i in range(L)]
        elif t == "phi3" or (t == "mistral"):
            self.windows = [w] * L
        else:
            self.windows = [None] * L
        self.rope = [(i + 1) % c.get("no_rope_layer_interval", 4) != 0 if t == "smollm3" else True for i in range(L)]
        theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        self.theta = [c.get("rope_local_base_freq", 10000.0) if t == "gemma3_text" and self.windows[i] else theta for i in range(L)]
        # Experts: (count, per token, intermediate, renormalise) and the sparse layers.
        self.moe, self.sparse = None, [False] * L
        if t == "qwen3_moe":
            self.moe = (c.get("num_experts", 128), c.get("num_experts_per_tok", 8), c.get("moe_intermediate_size", 768),
                        c.get("norm_topk_prob", False))
            only = c.get("mlp_only_layers") or []
            self.sparse = [i not in only and (i + 1) % c.get("decoder_sparse_step", 1) == 0 for i in range(L)]
        elif t == "mixtral":
            self.moe = (c.get("num_local_experts", 8), c.get("num_experts_per_tok", 2), c["intermediate_size"], True)
            self.sparse = [True] * L
        self.aux_coef = c.get("router_aux_loss_coef", 0.001)

    def lora_targets(self, i):
        """The projections a LoRA run adapts in layer i, PEFT's names: q and v (Phi-3: its fused
        qkv_proj); a DeltaNet layer's input and output projections (in_proj_qkv, out_proj)."""
        if self.linear[i]:
            return ("in_proj_qkv", "out_proj")
        return ("qkv_proj",) if self.fused else ("q_proj", "v_proj")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, offset=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.offset = offset  # Gemma: (1 + w) * x, the product in fp32

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (x * (1.0 + self.weight.float())).to(dtype)
        return self.weight * x.to(dtype)


class Adapters:
    """PEFT's disable_adapter(): a LoRA policy's DPO reference is its base, adapters off."""
    enabled = True


class LoraLinear(nn.Module):
    """PEFT's lora.Linear with dropout 0: base(x) + B(A(x)) * alpha / r, A and B in fp32."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, dtype=torch.float32)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / rank

    def forward(self, x):
        result = self.base(x)
        if not Adapters.enabled:
            return result
        x = x.to(self.lora_A.weight.dtype)
        return result + self.lora_B(self.lora_A(x)) * self.scaling


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    r = cos.size(-1)  # partial rotary: the trailing dimensions pass through
    if r < x.size(-1):
        return torch.cat((apply_rotary(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, c, f, i):
        super().__init__()
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = f.d
        self.f, self.i = f, i
        H = c["hidden_size"]
        if f.fused:
            self.qkv_proj = nn.Linear(H, (self.nh + 2 * self.nkv) * self.d, bias=False)
        else:
            self.q_proj = nn.Linear(H, self.nh * self.d * (2 if f.out_gate else 1), bias=False)
            self.k_proj = nn.Linear(H, self.nkv * self.d, bias=False)
            self.v_proj = nn.Linear(H, self.nkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.nh * self.d, H, bias=False)
        if f.qk_norm:
            self.q_norm = RMSNorm(self.d, c["rms_norm_eps"], f.offset_norm)
            self.k_norm = RMSNorm(self.d, c["rms_norm_eps"], f.offset_norm)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        if self.f.fused:
            q, k, v = self.qkv_proj(x).split([self.nh * self.d, self.nkv * self.d, self.nkv * self.d], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.f.out_gate:  # per head: d query dimensions, then d gate dimensions
            q, gate = q.view(B, T, self.nh, 2 * self.d).chunk(2, dim=-1)
        q = q.reshape(B, T, self.nh, self.d).transpose(1, 2)
        k = k.view(B, T, self.nkv, self.d).transpose(1, 2)
        v = v.view(B, T, self.nkv, self.d).transpose(1, 2)
        if self.f.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.f.rope[self.i]:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.nh // self.nkv
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.f.scale
        if self.f.attn_cap:
            scores = torch.tanh(scores / self.f.attn_cap) * self.f.attn_cap
        probs = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.nh * self.d)
        if self.f.out_gate:
            out = out * torch.sigmoid(gate.reshape(B, T, self.nh * self.d))
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.fused, self.I = f.fused, I
        self.act = (lambda g: F.gelu(g, approximate="tanh")) if f.gemma else F.silu
        if f.fused:
            self.gate_up_proj = nn.Linear(H, 2 * I, bias=False)
        else:
            self.gate_proj = nn.Linear(H, I, bias=False)
            self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.act(gate) * up)


class Expert(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    """Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock as transformers writes them."""

    def __init__(self, c, f):
        super().__init__()
        H = c["hidden_size"]
        self.E, self.k, I, self.norm = f.moe
        self.gate = nn.Linear(H, self.E, bias=False)
        self.experts = nn.ModuleList(Expert(H, I) for _ in range(self.E))
        self.router_logits = None

    def forward(self, x):
        B, T, H = x.shape
        h = x.view(-1, H)
        logits = self.gate(h)
        weights = F.softmax(logits, dim=1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.k, dim=-1)
        if self.norm:
            weights /= weights.sum(dim=-1, keepdim=True)
        weights = weights.to(h.dtype)
        out = torch.zeros((B * T, H), dtype=h.dtype)
        mask = F.one_hot(chosen, num_classes=self.E).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            slot, rows = torch.where(mask[e].squeeze(0))
            y = self.experts[int(e)](h[None, rows].reshape(-1, H)) * weights[rows, slot, None]
            out.index_add_(0, rows, y.to(h.dtype))
        self.router_logits = logits
        return out.reshape(B, T, H)


def load_balancing_loss(gate_logits, E, k):
    """transformers' load_balancing_loss_func without an attention mask."""
    logits = torch.cat(gate_logits, dim=0)
    probs = F.softmax(logits, dim=-1)
    _, chosen = torch.topk(probs, k, dim=-1)
    expert_mask = F.one_hot(chosen, E)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    prob_per_expert = torch.mean(probs, dim=0)
    return torch.sum(tokens_per_expert * prob_per_expert.unsqueeze(0)) * E


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunk_gated_delta_rule(q, k, v, g, beta, C=64):
    """The gated delta rule in chunks of C, as transformers' torch_chunk_gated_delta_rule computes
    it without the fla kernels: q, k, v [B, T, heads, d], g (log decay) and beta [B, T, Hv]; in
    fp32, q and k L2-normalised, the queries scaled by d^-1/2, the sequence padded to chunks; per
    chunk the unit lower-triangular system (I + tril(diag(beta) K K^T . decay)) solved for the new
    values and the decayed keys, then a Python loop over the chunks carries the [Dk, Dv] state."""
    dtype = q.dtype
    B, T, Hk, Dk = k.shape
    Hv, Dv = v.shape[-2:]
    if Hk != Hv:  # each query/key head serves Hv / Hk consecutive value heads
        q, k = q.repeat_interleave(Hv // Hk, dim=2), k.repeat_interleave(Hv // Hk, dim=2)
    q, k, v, beta, g = (x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format) for x in (q, k, v, beta, g))
    q, k = l2norm(q), l2norm(k)
    q = q * Dk ** -0.5
    pad = (C - T % C) % C
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    n = (T + pad) // C
    kb, vb = k * beta[..., None], v * beta[..., None]
    q, k, kb, vb = (x.reshape(B, Hv, n, C, x.size(-1)) for x in (q, k, kb, vb))
    g = g.reshape(B, Hv, n, C).cumsum(-1)  # log decay from the chunk's start
    future = torch.ones(C, C, dtype=torch.bool).triu(1)
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(future, float("-inf")).exp()
    system = (kb @ k.transpose(-1, -2)) * decay
    intra = (q @ k.transpose(-1, -2)) * decay
    u = torch.linalg.solve_triangular(system, vb, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(system, kb * g.exp()[..., None], upper=False, unitriangular=True)
    state = torch.zeros(B, Hv, Dk, Dv)
    out = torch.zeros_like(u)
    q = q * g.exp()[..., None]
    k = k * (g[..., -1:] - g).exp()[..., None]
    carry = g[..., -1].exp()[..., None, None]
    for i in range(n):
        v_new = u[:, :, i] - w[:, :, i] @ state
        out[:, :, i] = q[:, :, i] @ state + intra[:, :, i] @ v_new
        state = state * carry[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new
    return out.reshape(B, Hv, -1, Dv)[:, :, :T].transpose(1, 2).to(dtype, memory_format=torch.contiguous_format)


class GatedRMSNorm(nn.Module):
    """Qwen3_5RMSNormGated: w * norm(x), then times silu(z) in fp32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x, z):
        dtype = x.dtype
        x = x.float()
        x = self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)
        return (x * F.silu(z.float())).to(dtype)


class GatedDeltaNet(nn.Module):
    """Qwen3_5GatedDeltaNet on transformers' torch fallbacks (no causal-conv1d or fla kernels):
    in_proj_qkv through a depthwise causal conv1d and SiLU, beta = sigmoid(b),
    g = -exp(A_log) softplus(a + dt_bias) in fp32, the chunked rule above, the gated norm with
    z, out_proj. `linear(n_in, n_out)` makes the projections (each peer's own Linear)."""

    def __init__(self, c, linear=None):
        super().__init__()
        linear = linear or (lambda n_in, n_out: nn.Linear(n_in, n_out, bias=False))
        H, self.hv = c["hidden_size"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K, self.V = c["linear_num_key_heads"] * self.dk, self.hv * self.dv
        width, kernel = 2 * self.K + self.V, c["linear_conv_kernel_dim"]
        self.in_proj_qkv = linear(H, width)
        self.in_proj_z = linear(H, self.V)
        self.in_proj_b = linear(H, self.hv)
        self.in_proj_a = linear(H, self.hv)
        self.conv1d = nn.Conv1d(width, width, kernel, groups=width, padding=kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.zeros(self.hv))
        self.norm = GatedRMSNorm(self.dv, c["rms_norm_eps"])
        self.out_proj = linear(self.V, H)

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.in_proj_qkv(x).transpose(1, 2)
        z, b, a = self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)
        w = self.conv1d.weight
        qkv = F.silu(F.conv1d(qkv.to(w.dtype), w, padding=w.size(-1) - 1, groups=qkv.size(1))[..., :T]).to(qkv.dtype)
        q, k, v = qkv.transpose(1, 2).split([self.K, self.K, self.V], dim=-1)
        q, k, v = q.reshape(B, T, -1, self.dk), k.reshape(B, T, -1, self.dk), v.reshape(B, T, -1, self.dv)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        out = chunk_gated_delta_rule(q, k, v, g, beta)
        out = self.norm(out.reshape(-1, self.dv), z.reshape(-1, self.dv))
        return self.out_proj(out.reshape(B, T, -1))


class Layer(nn.Module):
    """Pre-norm block (sandwich norms for Gemma) over the given attention, MLP, norm and linear
    classes (this file's, or bench_eager_lean.py's); a Gated DeltaNet where f.linear says."""

    def __init__(self, c, f, i, parts=None):
        super().__init__()
        attention, mlp, norm, linear = parts or (Attention, MLP, RMSNorm, None)
        H, eps = c["hidden_size"], c["rms_norm_eps"]
        self.linear = f.linear[i]
        if self.linear:
            self.linear_attn = GatedDeltaNet(c, linear)
        else:
            self.self_attn = attention(c, f, i)
        self.mlp = SparseMoe(c, f) if f.sparse[i] else mlp(c, f)
        self.input_layernorm = norm(H, eps, f.offset_norm)
        self.post_attention_layernorm = norm(H, eps, f.offset_norm)
        self.sandwich = f.gemma
        if f.gemma:
            self.pre_feedforward_layernorm = norm(H, eps, True)
            self.post_feedforward_layernorm = norm(H, eps, True)

    def mixer(self):
        return self.linear_attn if self.linear else self.self_attn

    def mix(self, x, cos, sin, mask):
        return self.linear_attn(x) if self.linear else self.self_attn(x, cos, sin, mask)

    def forward(self, x, cos, sin, mask):
        if self.sandwich:
            x = x + self.post_attention_layernorm(self.mix(self.input_layernorm(x), cos, sin, mask))
            return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        x = x + self.mix(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        f = self.f = Family(c)
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c, f, i) for i in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], f.offset_norm)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.embed_tokens.weight
        r = f.rotary
        self.inv_freq = {t: 1.0 / (t ** (torch.arange(0, r, 2).float() / r)) for t in set(f.theta)}

    def forward(self, ids, positions, mask, labels):
        x = self.embed_tokens(ids)
        if self.f.gemma:
            x = x * torch.tensor(self.c["hidden_size"] ** 0.5, dtype=x.dtype)
        tables = {}
        for theta, inv_freq in self.inv_freq.items():
            freqs = positions[:, :, None].float() * inv_freq[None, None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            tables[theta] = (emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype))
        masks = {None: mask}
        for w in set(self.f.windows) - {None}:  # a window hides keys w or more positions back
            t = torch.arange(mask.size(-1))
            masks[w] = mask.masked_fill((t[:, None] - t[None, :]) >= w, torch.finfo(mask.dtype).min)
        for i, layer in enumerate(self.layers):
            cos, sin = tables[self.f.theta[i]]
            x = layer(x, cos, sin, masks[self.f.windows[i]])
        logits = self.lm_head(self.norm(x)).float()
        if self.f.final_cap:
            logits = torch.tanh(logits / self.f.final_cap) * self.f.final_cap
        if labels is None:  # a preference objective's forward: the logits that predict a next token
            return logits[:, :-1]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        if self.f.moe and self.f.aux_coef > 0:
            routers = [layer.mlp.router_logits for layer in self.layers if isinstance(layer.mlp, SparseMoe)]
            loss = loss + self.f.aux_coef * load_balancing_loss(routers, self.f.moe[0], self.f.moe[1])
        return loss


def selective_log_softmax(logits, targets):
    """TRL's selective_log_softmax for fp32 logits: the chosen logit less a logsumexp computed row
    by row (to bound the peak)."""
    chosen = torch.gather(logits, 2, targets[:, :, None]).squeeze(2)
    return chosen - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])


def dpo_loss(policy, reference, ids, prompt, beta=0.1, token_logps=selective_log_softmax):
    """TRL's DPOTrainer (sigmoid loss) on one concatenated batch: chosen rows, then rejected rows.

    policy() and reference() return the fp32 logits that predict ids[:, 1:]; a response's
    log-probability is the sum of token_logps over its tokens (the first `prompt` tokens are the
    shared prompt). The reference runs without gradients."""
    def logps(logits):
        return token_logps(logits, ids[:, 1:])[:, prompt - 1:].sum(-1)
    with torch.no_grad():
        ref = logps(reference())
    pol = logps(policy())
    n = ids.size(0) // 2
    margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
    return -F.logsigmoid(beta * margin).mean()


def preference_ids(batch, seq, vocab, gen):
    """batch pairs as 2 x batch rows (chosen rows first): a shared prompt of seq / 4 tokens, then
    two different responses filling the row (no padding, as the benchmark's preference file)."""
    ids = torch.randint(0, vocab, (2 * batch, seq), generator=gen)
    ids[batch:, :seq // 4] = ids[:batch, :seq // 4]
    return ids


def rows(batch, seq, doc_lengths):
    """Position ids and the additive mask: causal, and within each document when packed."""
    if not doc_lengths:
        positions = torch.arange(seq).expand(batch, seq)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        allowed = causal.expand(batch, 1, seq, seq)
    else:
        positions = torch.zeros(batch, seq, dtype=torch.long)
        segments = torch.zeros(batch, seq, dtype=torch.long)
        it = iter(doc_lengths * 1000)
        for b in range(batch):
            t, s = 0, 1
            while t < seq:
                n = min(next(it), seq - t)
                positions[b, t:t + n] = torch.arange(n)
                segments[b, t:t + n] = s
                t, s = t + n, s + 1
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        allowed = (causal & (segments[:, :, None] == segments[:, None, :]))[:, None]
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return positions, mask


def read_status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def cpu_times():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime


def step_mode(a):
    torch.manual_seed(0)
    c = json.load(open(a.config))
    model = Llama(c)
    for p in model.parameters():
        nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.ones_(p)
    bf16 = a.precision == "bf16"
    if a.method == "lora":
        model.requires_grad_(False)
        if bf16:
            model.to(torch.bfloat16)
        for i, layer in enumerate(model.layers):
            mixer = layer.mixer()
            for name in model.f.lora_targets(i):
                setattr(mixer, name, LoraLinear(getattr(mixer, name), a.rank, 2 * a.rank))
    dpo = a.objective == "dpo"
    # DPO under full fine-tuning: TRL's ref_model, a frozen copy loaded like the policy.
    reference = copy.deepcopy(model).requires_grad_(False) if dpo and a.method == "full" else None
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0)
    lengths = [int(x) for x in open(a.doc_lengths).read().split()] if a.doc_lengths else []
    n_rows = 2 * a.batch if dpo else a.batch
    positions, mask = rows(n_rows, a.seq, lengths)
    if bf16 and a.method == "lora":
        mask = mask.to(torch.bfloat16)
    gen = torch.Generator().manual_seed(1)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    times, cpu, losses = [], [], []
    for _ in range(a.steps):
        vocab = min(c["vocab_size"], 256)
        ids = preference_ids(a.batch, a.seq, vocab, gen) if dpo else torch.randint(0, vocab, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        cpu.append(cpu_times())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if dpo:
                policy = lambda: model(ids, positions, mask, None)
                ref = (lambda: reference(ids, positions, mask, None)) if reference else (lambda: adapters_off(policy))
                loss = dpo_loss(policy, ref, ids, a.seq // 4)
            else:
                loss = model(ids, positions, mask, ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    cpu.append(cpu_times())
    timed = times[1:] or times
    total, system = cpu[-1][0] - cpu[1][0], cpu[-1][1] - cpu[1][1]
    print(json.dumps({"tokens_per_s": n_rows * a.seq / statistics.median(timed), "step_s": statistics.median(timed),
                      "sys_share": system / total if total > 0 else 0.0, "peak_bytes": read_status("VmHWM:"),
                      "first_loss": losses[0], "threads": torch.get_num_threads()}))


def adapters_off(forward):
    """PEFT's disable_adapter() around one forward: a LoRA policy's DPO reference."""
    Adapters.enabled = False
    try:
        return forward()
    finally:
        Adapters.enabled = True


def gemm_mode(a):
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    x = torch.randn(a.size, a.size).to(dtype)
    y = torch.randn(a.size, a.size).to(dtype)
    best = math.inf
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        torch.mm(x, y)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"dtype": a.dtype, "size": a.size, "flops_per_s": 2 * a.size ** 3 / best,
                      "threads": torch.get_num_threads()}))


def add_step_arguments(s):
    """The step mode's arguments (bench_eager_lean.py takes the same)."""
    s.add_argument("--config", required=True)
    s.add_argument("--method", choices=["lora", "full"], required=True)
    s.add_argument("--precision", choices=["fp32", "bf16"], required=True)
    s.add_argument("--seq", type=int, required=True)
    s.add_argument("--batch", type=int, required=True)
    s.add_argument("--steps", type=int, default=4)
    s.add_argument("--rank", type=int, default=8)
    s.add_argument("--doc-lengths")
    s.add_argument("--objective", choices=["sft", "dpo"], default="sft",
                   help="dpo: --batch pairs of a shared prompt (seq / 4 tokens) and two responses")
    s.add_argument("--threads", type=int, default=0)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    add_step_arguments(sub.add_parser("step"))
    g = sub.add_parser("gemm")
    g.add_argument("--dtype", choices=["fp32", "bf16"], required=True)
    g.add_argument("--size", type=int, default=2048)
    g.add_argument("--repeats", type=int, default=5)
    g.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.mode == "step" and a.objective == "dpo" and a.doc_lengths:
        p.error("--objective dpo takes unpacked rows (no --doc-lengths)")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    step_mode(a) if a.mode == "step" else gemm_mode(a)


if __name__ == "__main__":
    main()
