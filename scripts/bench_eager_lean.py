#!/usr/bin/python3
"""The lean PyTorch eager peer of ctune's training step, for scripts/bench.sh. Shares no code with ctune.

bench_eager.py is the step a Hugging Face transformers + PEFT user runs; this is the fastest
plain eager step a PyTorch user could write on the same LibTorch kernels, without Hugging Face's
extra casts (issue 33):
  - mixed precision is torch.autocast("cpu", bfloat16); a LoRA run's frozen base is stored in
    bf16, and LoRA A and B (fp32 masters) run on the bf16 activations as autocast casts them:
    no fp32 copy of the layer input, no fp32 LoRA matmuls;
  - RMSNorm keeps Hugging Face's numerics (statistics in fp32) in as few passes as eager allows;
  - grouped-query attention multiplies each KV head against its query heads through a view
    ([B, kv, groups * T, d]), without repeating K and V; the scores are materialised, masked
    in place and soft-maxed in fp32;
  - the logits are fp32 for the cross entropy (one cast); torch.optim.AdamW (foreach) and
    clip_grad_norm_;
  - DPO (--objective dpo): bench_eager.py's step, with each token's log-probability taken by the
    fused cross-entropy kernel (fused_log_softmax).
The families change the decoder as in bench_eager.py (its Family class, the one description of
what a model_type changes), and so do the rows, the timing and the output line. Qwen3.5's
DeltaNet layers run bench_eager.py's GatedDeltaNet (transformers' chunk loop; there is no leaner
eager form of the rule) on this file's Linear.

  bench_eager_lean.py step --config CONFIG.json --method lora|full --precision fp32|bf16
                           --seq T --batch B --steps N [--doc-lengths FILE]
"""
import argparse
import copy
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from bench_eager import (Adapters, Family, Layer, add_step_arguments, cpu_times, dpo_loss, preference_ids, read_status,
                         adapters_off, rows)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, offset=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.offset = offset

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True).add_(self.eps))
        if self.offset:  # Gemma: (1 + w) in fp32
            return (y * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * y.to(x.dtype)


class Linear(nn.Module):
    """y = x Wᵀ (+ LoRA: B A x · alpha / r on the same activations, in the autocast dtype)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.lora_A = self.lora_B = None

    def add_lora(self, rank, alpha):
        self.lora_A = nn.Parameter(torch.empty(rank, self.weight.size(1)))
        self.lora_B = nn.Parameter(torch.zeros(self.weight.size(0), rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = alpha / rank

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.lora_A is None or not Adapters.enabled:
            return y
        return y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling


def rotate(x, cos, sin):
    r = cos.size(-1)
    if r < x.size(-1):  # partial rotary: the trailing dimensions pass through
        return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, c, f, i):
        super().__init__()
        self.nh, self.nkv, self.d, self.f, self.i = c["num_attention_heads"], c["num_key_value_heads"], f.d, f, i
        H = c["hidden_size"]
        if f.fused:
            self.qkv_proj = Linear(H, (self.nh + 2 * self.nkv) * self.d)
        else:
            self.q_proj = Linear(H, self.nh * self.d * (2 if f.out_gate else 1))
            self.k_proj = Linear(H, self.nkv * self.d)
            self.v_proj = Linear(H, self.nkv * self.d)
        self.o_proj = Linear(self.nh * self.d, H)
        if f.qk_norm:
            self.q_norm = RMSNorm(self.d, c["rms_norm_eps"], f.offset_norm)
            self.k_norm = RMSNorm(self.d, c["rms_norm_eps"], f.offset_norm)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        nh, nkv, d = self.nh, self.nkv, self.d
        if self.f.fused:
            q, k, v = self.qkv_proj(x).split([nh * d, nkv * d, nkv * d], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.f.out_gate:  # per head: d query dimensions, then d gate dimensions
            q, gate = q.view(B, T, nh, 2 * d).chunk(2, dim=-1)
        q, k, v = q.reshape(B, T, nh, d), k.view(B, T, nkv, d), v.view(B, T, nkv, d)
        if self.f.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.f.rope[self.i]:
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        g = nh // nkv  # query heads per KV head, side by side: [B, kv, g T, d]; the scale folded into q
        q = (q * self.f.scale).to(v.dtype).reshape(B, nkv, g * T, d)
        scores = torch.matmul(q, k.to(v.dtype).transpose(2, 3)).view(B, nkv, g, T, T)
        if self.f.attn_cap:
            scores = torch.tanh(scores / self.f.attn_cap) * self.f.attn_cap
        # Out of place: an in-place op on a view of the matmul's output costs autograd a copy of it.
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1, dtype=torch.float32).to(v.dtype)
        out = torch.matmul(probs.view(B, nkv, g * T, T), v).view(B, nh, T, d).transpose(1, 2).reshape(B, T, nh * d)
        if self.f.out_gate:
            out = out * torch.sigmoid(gate.reshape(B, T, nh * d))
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.fused, self.gelu = f.fused, f.gemma
        if f.fused:
            self.gate_up_proj = Linear(H, 2 * I)
        else:
            self.gate_proj = Linear(H, I)
            self.up_proj = Linear(H, I)
        self.down_proj = Linear(I, H)

    def forward(self, x):
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        act = F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)
        return self.down_proj(act * up)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c, f = c, Family(c)
        self.f = f
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c, f, i, (Attention, MLP, RMSNorm, Linear)) for i in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], f.offset_norm)
        self.lm_head = Linear(c["hidden_size"], c["vocab_size"])
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.embed_tokens.weight
        r = f.rotary
        self.inv_freq = {t: 1.0 / (t ** (torch.arange(0, r, 2).float() / r)) for t in set(f.theta)}

    def forward(self, ids, positions, hidden_mask, labels, dtype):
        x = self.embed_tokens(ids)
        if self.f.gemma:
            x = x * torch.tensor(self.c["hidden_size"] ** 0.5, dtype=x.dtype)
        tables = {}
        for theta, inv_freq in self.inv_freq.items():  # one table per theta, in the compute dtype
            freqs = positions[:, :, None].float() * inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)[:, None]
            tables[theta] = (emb.cos().to(dtype), emb.sin().to(dtype))
        masks = {None: hidden_mask}  # true: hidden; [B, 1, 1, T, T] over the KV-grouped scores
        for w in set(self.f.windows) - {None}:
            t = torch.arange(hidden_mask.size(-1))
            masks[w] = hidden_mask | ((t[:, None] - t[None, :]) >= w)
        for i, layer in enumerate(self.layers):
            x = layer(x, *tables[self.f.theta[i]], masks[self.f.windows[i]])
        # Logits only where a next token is predicted (no slice of the full logits), in fp32.
        logits = self.lm_head(self.norm(x)[:, :-1]).float()
        if self.f.final_cap:
            logits = torch.tanh(logits / self.f.final_cap) * self.f.final_cap
        if labels is None:  # a preference objective's forward
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))


def fused_log_softmax(logits, targets):
    """Each target's log-probability through the fused cross-entropy kernel (its backward writes the
    logits' gradient in one pass), not TRL's gather less a logsumexp."""
    flat = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
    return -flat.view(targets.shape)


def step_mode(a):
    torch.manual_seed(0)
    c = json.load(open(a.config))
    model = Model(c)
    for p in model.parameters():
        nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.ones_(p)
    bf16 = a.precision == "bf16"
    dtype = torch.bfloat16 if bf16 else torch.float32
    if a.method == "lora":
        model.requires_grad_(False)
        model.to(dtype)  # the frozen base in the compute dtype
        for i, layer in enumerate(model.layers):
            for name in model.f.lora_targets(i):
                getattr(layer.mixer(), name).add_lora(a.rank, 2 * a.rank)
    dpo = a.objective == "dpo"
    reference = copy.deepcopy(model).requires_grad_(False) if dpo and a.method == "full" else None
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0, foreach=True)
    lengths = [int(x) for x in open(a.doc_lengths).read().split()] if a.doc_lengths else []
    n_rows = 2 * a.batch if dpo else a.batch
    positions, additive = rows(n_rows, a.seq, lengths)
    hidden_mask = (additive != 0)[:, :, None]  # [B, 1, 1, T, T]
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
            if dpo:  # the same step as bench_eager.py's, on this decoder
                policy = lambda: model(ids, positions, hidden_mask, None, dtype)
                ref = (lambda: reference(ids, positions, hidden_mask, None, dtype)) if reference else (lambda: adapters_off(policy))
                loss = dpo_loss(policy, ref, ids, a.seq // 4, token_logps=fused_log_softmax)
            else:
                loss = model(ids, positions, hidden_mask, ids, dtype)
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


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    add_step_arguments(sub.add_parser("step"))
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    step_mode(a)


if __name__ == "__main__":
    main()
