"""Independent reference for the gpt-oss family (GptOssForCausalLM): config.json keys as the
released checkpoints carry them, tensor names and shapes, random weights (the experts optionally
stored in MXFP4), and a float64 forward written from transformers' modeling_gpt_oss.py,
configuration_gpt_oss.py, modeling_rope_utils.py (_compute_yarn_parameters) and
integrations/mxfp4.py (convert_moe_packed_tensors). Used by make_reference.py; shares no code
with ctune.

A decoder layer: h = x + Attn(RMSNorm(x)); y = h + MoE(RMSNorm(h)), RMSNorm w * x / rms(x).
- Attention: q/k/v/o with biases, RoPE (rotate-half over the whole head) with YaRN frequencies
  and cos/sin times the attention factor, grouped-query heads, scale head_dim^-0.5, a causal
  mask, on sliding_attention layers also q - k < sliding_window; the softmax over each row's
  scores and one more logit, the head's sink (self_attn.sinks), whose column is then dropped.
- MoE: router logits = h W^T + b; the top k logits, softmaxed among themselves; each expert e
  gu = x gate_up_proj[e] + gate_up_proj_bias[e] ([E, H, 2I], gate = even columns, up = odd
  ones), gate clamped above at swiglu_limit, up clamped to +-swiglu_limit, glu = gate *
  sigmoid(alpha gate) with alpha 1.702, out = ((up + 1) glu) down_proj[e] + down_proj_bias[e],
  weighted and summed over the chosen experts (transformers' expert loop with index_add_).
MXFP4 (the released checkpoints' experts): P [E, A, B] is stored as P_blocks [E, B, A/32, 16]
uint8 (two 4-bit E2M1 codes a byte, low nibble first) and P_scales [E, B, A/32] uint8 (a power
of two 2^(s - 127) per 32 values); dequantised as [E, B, A] then transposed to [E, A, B].
"""
import math

import torch

TYPES = ("gpt_oss",)

# Keys every released gpt-oss config.json carries (gpt-oss-20b / 120b), at the values they share;
# each case sets its dimensions on top. The released rope section is YaRN with these keys.
RELEASED = dict(architectures=["GptOssForCausalLM"], attention_bias=True, attention_dropout=0.0, eos_token_id=2,
                experts_per_token=2, head_dim=16, hidden_act="silu", initial_context_length=64, initializer_range=0.02,
                max_position_embeddings=512, output_router_logits=False, pad_token_id=1, rms_norm_eps=1e-05,
                rope_theta=150000, router_aux_loss_coef=0.9, sliding_window=48, swiglu_limit=7.0,
                tie_word_embeddings=False, transformers_version="4.55.0.dev0", use_cache=True, vocab_size=300,
                hidden_size=64)

# GptOssConfig's rope when config.json has none.
DEFAULT_YARN = dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                    original_max_position_embeddings=4096)

E2M1 = [+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

# The MXFP4 tensors of the last random_weights call with `_mxfp4` (name -> uint8 tensor).
PACKED = {}


def config(case):
    cfg = dict(RELEASED)
    cfg.update({k: v for k, v in case.items() if not k.startswith("_")})
    if case.get("_mxfp4"):
        cfg["quantization_config"] = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                 "model.embed_tokens", "lm_head"],
                                      "quant_method": "mxfp4"}
    return dict(sorted(cfg.items()))


def dims(cfg):
    return dict(H=cfg["hidden_size"], V=cfg["vocab_size"], nh=cfg["num_attention_heads"], nkv=cfg["num_key_value_heads"],
                d=cfg.get("head_dim", 64), E=cfg["num_local_experts"], k=cfg["num_experts_per_tok"],
                I=cfg["intermediate_size"], L=cfg["num_hidden_layers"])


def layer_types(cfg):
    """GptOssConfig: layer_types when given, else sliding on the even layers."""
    if cfg.get("layer_types") is not None:
        return list(cfg["layer_types"])
    return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(cfg["num_hidden_layers"])]


def tensor_shapes(cfg):
    """GptOssForCausalLM's state dict, in its order."""
    D = dims(cfg)
    H, V, nh, nkv, d, E, I = D["H"], D["V"], D["nh"], D["nkv"], D["d"], D["E"], D["I"]
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(D["L"]):
        p = f"model.layers.{i}."
        for proj, rows in (("q_proj", nh * d), ("k_proj", nkv * d), ("v_proj", nkv * d)):
            out += [(p + f"self_attn.{proj}.weight", (rows, H)), (p + f"self_attn.{proj}.bias", (rows,))]
        out += [(p + "self_attn.o_proj.weight", (H, nh * d)), (p + "self_attn.o_proj.bias", (H,)), (p + "self_attn.sinks", (nh,))]
        out += [(p + "mlp.router.weight", (E, H)), (p + "mlp.router.bias", (E,)),
                (p + "mlp.experts.gate_up_proj", (E, H, 2 * I)), (p + "mlp.experts.gate_up_proj_bias", (E, 2 * I)),
                (p + "mlp.experts.down_proj", (E, I, H)), (p + "mlp.experts.down_proj_bias", (E, H))]
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
    out += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    return out


def mxfp4_dequantize(blocks, scales, dtype=torch.bfloat16):
    """convert_moe_packed_tensors: a lookup of each nibble (low first) in the E2M1 table, times
    2^(scale - 127) (transformers' ldexp in bf16; here in float64, exact either way), the rows
    [.., G, 32] flattened to [.., 32 G], the last two dims of the 3-D result transposed."""
    lut = torch.tensor(E2M1, dtype=torch.float64)
    exp = scales.to(torch.int32) - 127
    lo, hi = lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]
    vals = torch.stack((lo, hi), dim=-1).reshape(*blocks.shape[:-1], 32)   # [E, B, G, 32]
    vals = vals * torch.pow(2.0, exp.unsqueeze(-1).to(torch.float64))     # exact: 2 significant bits
    return vals.reshape(*blocks.shape[:-2], -1).transpose(1, 2).contiguous().to(dtype)


def random_mxfp4(shape, gen):
    """Blocks and scales of a random MXFP4 parameter of `shape` [E, A, B]: uniform codes, scales
    2^-5 .. 2^-3 (values up to 0.75: sums over the hidden size stay O(1))."""
    E, A, B = shape
    blocks = torch.randint(0, 256, (E, B, A // 32, 16), generator=gen, dtype=torch.int64).to(torch.uint8)
    scales = torch.randint(122, 125, (E, B, A // 32), generator=gen, dtype=torch.int64).to(torch.uint8)
    return blocks, scales


def random_weights(cfg, gen, dtype, mxfp4=False):
    """Weights (std ~0.125, biases 0.1, sinks ~N(0, 1) so that they take a real share of every
    row, norms 1 + 0.1 N), rounded to the storage dtype. With `mxfp4` the experts' matrices are
    random MXFP4 tensors (kept in PACKED) and the weights their dequantisation."""
    PACKED.clear()
    weights = {}
    for name, shape in tensor_shapes(cfg):
        if mxfp4 and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales = random_mxfp4(shape, gen)
            PACKED[name + "_blocks"], PACKED[name + "_scales"] = blocks, scales
            weights[name] = mxfp4_dequantize(blocks, scales).to(dtype)
            continue
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("sinks"):
            t = torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        else:
            t = 0.125 * torch.randn(shape, generator=gen)
        weights[name] = t.to(dtype)
    return weights


def stored_tensors(weights):
    """The checkpoint's tensors: the MXFP4 experts (when PACKED holds them) as blocks and scales
    in place of their dense form, everything else as is."""
    out = {}
    for name, t in weights.items():
        if name + "_blocks" in PACKED:
            out[name + "_blocks"], out[name + "_scales"] = PACKED[name + "_blocks"], PACKED[name + "_scales"]
        else:
            out[name] = t
    return out


def yarn(cfg):
    """_compute_yarn_parameters: (inv_freq [d/2] fp32, attention factor)."""
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or DEFAULT_YARN
    base = params.get("rope_theta", cfg.get("rope_theta", 150000.0))
    dim = dims(cfg)["d"]
    original = params.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
    factor = params.get("factor") or cfg["max_position_embeddings"] / original

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = get_mscale(factor, m) / get_mscale(factor, m_all) if m and m_all else get_mscale(factor)
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))
    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv, attention_factor


def rope_tables(cfg, T, dtype):
    """cos, sin [T, d]: GptOssRotaryEmbedding in fp32 (times the attention factor), duplicated
    over the two halves that _apply_rotary_emb rotates."""
    inv, scale = yarn(cfg)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    cos, sin = (freqs.cos() * scale).to(dtype), (freqs.sin() * scale).to(dtype)
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def attention(cfg, W, p, h, cos, sin, window, lora=None):
    D = dims(cfg)
    T, nh, nkv, d = h.shape[0], D["nh"], D["nkv"], D["d"]

    def lin(x, name):  # with PEFT's LoRA where `lora` has A and B for the layer: + s B A x
        y = x @ W[name + ".weight"].T + W[name + ".bias"]
        if lora and name + ".lora_A.weight" in lora:
            y = y + LORA_SCALE * (x @ lora[name + ".lora_A.weight"].T) @ lora[name + ".lora_B.weight"].T
        return y

    def rope(x):
        first, second = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat((-second, first), dim=-1) * sin
    q = rope(lin(h, p + "q_proj").view(T, nh, d).transpose(0, 1))
    k = rope(lin(h, p + "k_proj").view(T, nkv, d).transpose(0, 1)).repeat_interleave(nh // nkv, dim=0)
    v = lin(h, p + "v_proj").view(T, nkv, d).transpose(0, 1).repeat_interleave(nh // nkv, dim=0)
    s = (q @ k.transpose(1, 2)) * d ** -0.5
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = ki <= qi
    if window is not None:
        allowed = allowed & (qi - ki < window)
    s = s.masked_fill(~allowed, float("-inf"))
    sinks = W[p + "sinks"].view(nh, 1, 1).expand(nh, T, 1)
    combined = torch.cat((s, sinks), dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)[..., :-1]     # the sink's column dropped
    return lin((probs @ v).transpose(0, 1).reshape(T, nh * d), p + "o_proj")


def moe(cfg, W, p, h, stats):
    D = dims(cfg)
    E, k = D["E"], D["k"]
    limit, alpha = cfg.get("swiglu_limit", 7.0), cfg.get("swiglu_alpha", 1.702)
    logits = h @ W[p + "router.weight"].T + W[p + "router.bias"]
    top, idx = torch.topk(logits, k, dim=-1)
    top = torch.softmax(top, dim=1)
    if stats is not None and k < E:
        ranked = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True).values
        stats["route_margin"] = min(stats.get("route_margin", 1.0), (ranked[:, k - 1] - ranked[:, k]).min().item())
    out = torch.zeros_like(h)
    for e in range(E):
        rows, slot = torch.where(idx == e)
        if rows.numel() == 0:
            continue
        gu = h[rows] @ W[p + "experts.gate_up_proj"][e] + W[p + "experts.gate_up_proj_bias"][e]
        gate, up = gu[..., ::2].clamp(min=None, max=limit), gu[..., 1::2].clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(gate * alpha)
        y = ((up + 1) * glu) @ W[p + "experts.down_proj"][e] + W[p + "experts.down_proj_bias"][e]
        out = out.index_add(0, rows, y * top[rows, slot, None])
    return out


def forward(cfg, w, ids, dtype=torch.float64, stats=None, lora=None):
    """Logits [T, V] in `dtype` for one sequence from position 0; `stats` receives the smallest
    k-th/(k+1)-th router probability gap; `lora` (name -> A or B) adds adapters to attention."""
    W = {n: t.to(dtype) for n, t in w.items()}
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    cos, sin = rope_tables(cfg, T, dtype)
    window = cfg.get("sliding_window")
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        x = x + attention(cfg, W, p + "self_attn.", rms(x, W[p + "input_layernorm.weight"], eps), cos, sin,
                          window if kind == "sliding_attention" else None, lora)
        x = x + moe(cfg, W, p + "mlp.", rms(x, W[p + "post_attention_layernorm.weight"], eps), stats)
    return rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


# LoRA of the gradient reference: PEFT's r 4, alpha 8 (scale alpha / r) on q/k/v/o_proj.
LORA_RANK, LORA_ALPHA = 4, 8.0
LORA_SCALE = LORA_ALPHA / LORA_RANK
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def random_lora(cfg, gen):
    """A and B of every target layer, B non-zero so that every gradient is; exact in fp32."""
    lora = {}
    for name, shape in tensor_shapes(cfg):
        layer = name[: -len(".weight")]
        if name.endswith(".weight") and layer.split(".")[-1] in LORA_TARGETS:
            out_f, in_f = shape
            lora[layer + ".lora_A.weight"] = (0.2 * torch.randn(LORA_RANK, in_f, generator=gen)).to(torch.float32).double()
            lora[layer + ".lora_B.weight"] = (0.2 * torch.randn(out_f, LORA_RANK, generator=gen)).to(torch.float32).double()
    return lora


def mean_nll(cfg, W, ids, lora=None):
    """The loss both sides differentiate: the mean over the T - 1 predicted tokens of -log p."""
    dtype = next(iter(W.values())).dtype  # float64 for the exact run, float32 for the noise runs
    logp = torch.log_softmax(forward(cfg, W, ids, dtype, lora=lora), dim=-1)
    return -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean()


def gradient_reference(cfg, weights, ids, gen, fp32_noise, relative_norm):
    """Float64 autograd of mean_nll for full fine-tuning (every parameter, sinks, router bias and
    the stacked experts included) and for LoRA on attention (the base frozen), with how far
    float32 rounding alone moves each gradient (relative norm). Returns (tensors, info)."""
    w64 = {n: t.to(torch.float64) for n, t in weights.items()}
    lora = random_lora(cfg, gen)

    def full(t):
        leaves = {n: v.clone().requires_grad_(True) for n, v in t.items()}
        loss = mean_nll(cfg, leaves, ids)
        grads = torch.autograd.grad(loss, list(leaves.values()))
        return {"loss": loss, **{"full." + n: g for n, g in zip(leaves, grads)}}

    def adapters(t):
        base = {n: v for n, v in t.items() if ".lora_" not in n}
        leaves = {n: v.clone().requires_grad_(True) for n, v in t.items() if ".lora_" in n}
        loss = mean_nll(cfg, base, ids, leaves)
        grads = torch.autograd.grad(loss, list(leaves.values()))
        return {"lora_loss": loss, **{"lora." + n: g for n, g in zip(leaves, grads)}}
    exact = {**full(w64), **adapters({**w64, **lora})}
    noise = {**fp32_noise(full, w64, relative_norm), **fp32_noise(adapters, {**w64, **lora}, relative_norm)}
    tensors = [(n, g.detach()) for n, g in exact.items() if "." in n and not n.endswith("loss")]
    tensors += [("adapter." + n, t.to(torch.float32)) for n, t in lora.items()]
    info = {"loss": exact["loss"].item(), "lora_loss": exact["lora_loss"].item(), "noise": noise,
            "lora_rank": LORA_RANK, "lora_alpha": LORA_ALPHA, "lora_targets": list(LORA_TARGETS)}
    return tensors, info
