#!/usr/bin/python3
"""The PyTorch eager peer of `ctune generate`, for scripts/bench_decode.sh. Shares no code with ctune.

Greedy generation with a KV cache from a Hugging Face Llama directory (config.json and
model.safetensors, read by the small reader below: python3-torch has no `safetensors` package),
written the way transformers' LlamaForCausalLM and generate() compute it, in eager mode:
  - RMSNorm in fp32, rotate-half RoPE (inv_freq from rope_theta, cos/sin per forward from the
    position ids), GQA by repeating the KV heads (expand + reshape, HF's repeat_kv), materialised
    scores with an additive causal mask and a softmax in fp32 (attn_implementation="eager": the
    SDPA path needs torch >= 2.0, Debian's python3-torch is 1.13), SwiGLU, tied head if config.json
    says so;
  - the cache grows by torch.cat every step, as HF's DynamicCache does (ctune preallocates);
  - the head runs on the last position only, as generate() asks for since transformers 4.45
    (logits_to_keep=1), and the logits go to fp32 before the argmax;
  - each step reads the new tokens back to the host (HF checks its stopping criteria there too).
It is leaner than transformers (no module hooks, no cache or mask objects, no logits processors),
so it is a strict peer: whatever transformers spends in Python on top of this is not counted.

Stopping follows `ctune generate`: a sequence stops at an eos id (not returned) or after
--max-new-tokens; a finished sequence keeps stepping with its last token, unread.
Timing follows ctune's GenerateStats: prefill = the prompts' forward pass and the choice of each
sequence's first token, over the prompt tokens; decode = every later step, over the tokens those
steps kept, all sequences together.

  bench_decode.py --model DIR --prompts CTUNE.jsonl --batch B --max-new-tokens N --threads T
The prompts are the prompt_ids of `ctune generate --json` (so both sides decode the same ids), all
of one length. The first B are a warm-up generation, untimed, as ctune's first group is; the next
B are timed. Prints one JSON line: rates, generated ids of the timed group, peak resident bytes
(VmHWM reset after loading, as ctune resets it after loading) and the thread count.
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}


def read_safetensors(path):
    """name -> tensor. Layout: u64 little-endian header length, a JSON header of
    {name: {dtype, shape, data_offsets: [begin, end]}} (offsets after the header), the raw data."""
    tensors = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            f.seek(8 + n + begin)
            buf = bytearray(end - begin)  # one buffer per tensor: no second copy of the file
            f.readinto(buf)
            dtype = DTYPES[info["dtype"]]
            t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
            tensors[name] = t.view(info["shape"])
    return tensors


def eos_ids(model_dir, config):
    """The stop ids ctune uses: config.json's and generation_config.json's eos_token_id, and the
    tokenizer's eos token."""
    ids = set()

    def add(v):
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, list):
            ids.update(v)

    add(config.get("eos_token_id"))
    gen = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(gen):
        add(json.load(open(gen)).get("eos_token_id"))
    tc, tj = os.path.join(model_dir, "tokenizer_config.json"), os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tc) and os.path.exists(tj):
        eos = json.load(open(tc)).get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        add(next((t["id"] for t in json.load(open(tj)).get("added_tokens", []) if t["content"] == eos), None))
    return sorted(ids)


class Llama:
    """LlamaForCausalLM's inference forward over a list of per-layer (k, v) caches."""

    def __init__(self, config, weights):
        c = config
        if c.get("rope_scaling"):
            raise SystemExit("bench_decode.py: rope_scaling is not implemented")
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or c["hidden_size"] // self.nh
        self.eps = c["rms_norm_eps"]
        self.embed = weights["model.embed_tokens.weight"]
        self.head = self.embed if c.get("tie_word_embeddings") else weights["lm_head.weight"]
        self.norm = weights["model.norm.weight"]
        self.layers = []
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            self.layers.append({k: weights[p + n + ".weight"] for k, n in [
                ("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm"),
                ("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
                ("o", "self_attn.o_proj"), ("gate", "mlp.gate_proj"), ("up", "mlp.up_proj"),
                ("down", "mlp.down_proj")]})
        self.inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, self.d, 2).float() / self.d))

    def rms_norm(self, x, w):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x.to(dtype)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(self, x):  # [B, nkv, S, d] -> [B, nh, S, d], each KV head serving nh / nkv heads
        B, nkv, S, d = x.shape
        g = self.nh // nkv
        return x if g == 1 else x[:, :, None].expand(B, nkv, g, S, d).reshape(B, nkv * g, S, d)

    def forward(self, ids, start, cache):
        """Next-token logits [B, V] (fp32) of ids [B, T] at positions start..start+T-1; appends the
        new keys and values to `cache` (a list of (k, v) per layer, empty before the prompt)."""
        B, T = ids.shape
        x = F.embedding(ids, self.embed)
        positions = torch.arange(start, start + T, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)  # [T, d], broadcast over B and heads
        mask = None
        if T > 1:  # the prompt: causal over itself (no padding: all prompts have one length)
            mask = torch.full((T, start + T), torch.finfo(x.dtype).min).triu(start + 1)
        for i, w in enumerate(self.layers):
            h = self.rms_norm(x, w["ln1"])
            q = F.linear(h, w["q"]).view(B, T, self.nh, self.d).transpose(1, 2)
            k = F.linear(h, w["k"]).view(B, T, self.nkv, self.d).transpose(1, 2)
            v = F.linear(h, w["v"]).view(B, T, self.nkv, self.d).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            if len(cache) > i:  # DynamicCache.update: concatenate along the sequence
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            scores = torch.matmul(q, self.repeat_kv(k).transpose(2, 3)) / math.sqrt(self.d)
            if mask is not None:
                scores = scores + mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            a = torch.matmul(probs, self.repeat_kv(v)).transpose(1, 2).reshape(B, T, self.nh * self.d)
            x = x + F.linear(a, w["o"])
            h = self.rms_norm(x, w["ln2"])
            x = x + F.linear(F.silu(F.linear(h, w["gate"])) * F.linear(h, w["up"]), w["down"])
        last = self.rms_norm(x[:, -1], self.norm)
        return F.linear(last, self.head).float()


def generate(model, prompts, max_new_tokens, stop_ids):
    """Greedy generation as `ctune generate` does it; returns (ids per sequence, stop reasons, stats)."""
    B, P = len(prompts), len(prompts[0])
    ids = torch.tensor(prompts, dtype=torch.long)
    out = [[] for _ in range(B)]
    reasons = [""] * B
    cache = []
    decode_tokens, running, start = 0, B, 0
    t0 = time.perf_counter()
    prefill_s = 0.0
    for step in range(max_new_tokens):
        logits = model.forward(ids, start, cache)
        start += ids.shape[1]
        nxt = logits.argmax(-1).tolist()  # the host sync each step
        for b in range(B):
            if reasons[b]:
                continue
            if nxt[b] in stop_ids:
                reasons[b] = "eos"
                running -= 1
                continue
            out[b].append(nxt[b])
            if step > 0:
                decode_tokens += 1
        if step == 0:
            prefill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
        if running == 0:
            break
        # Every sequence takes the next step; a finished one's token is never read.
        ids = torch.tensor(nxt, dtype=torch.long).view(B, 1)
    decode_s = time.perf_counter() - t0
    reasons = [r or "length" for r in reasons]
    return out, reasons, {"prefill_s": prefill_s, "decode_s": decode_s, "prefill_tokens": B * P,
                          "decode_tokens": decode_tokens}


def peak_resident():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True, help="ctune generate --json output: its prompt_ids")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    config = json.load(open(os.path.join(a.model, "config.json")))
    model = Llama(config, read_safetensors(os.path.join(a.model, "model.safetensors")))
    stop_ids = eos_ids(a.model, config)
    prompts = [json.loads(line)["prompt_ids"] for line in open(a.prompts) if line.strip()]
    if len(prompts) != 2 * a.batch or len({len(q) for q in prompts}) != 1:
        raise SystemExit(f"bench_decode.py: want 2 x {a.batch} prompts of one length, got {len(prompts)}")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak is generation's, not loading's (ctune: train::reset_peak_resident)
    with torch.inference_mode():
        generate(model, prompts[:a.batch], a.max_new_tokens, stop_ids)  # warm-up
        out, reasons, s = generate(model, prompts[a.batch:], a.max_new_tokens, stop_ids)
    print(json.dumps({"batch": a.batch, "prompt_tokens": len(prompts[0]),
                      "prefill_tokens_per_s": s["prefill_tokens"] / max(1e-9, s["prefill_s"]),
                      "decode_tokens_per_s": s["decode_tokens"] / max(1e-9, s["decode_s"]),
                      "decode_tokens": s["decode_tokens"], "generated_ids": out, "stop_reasons": reasons,
                      "peak_memory_bytes": peak_resident(), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
