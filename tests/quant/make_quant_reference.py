#!/usr/bin/env python3
"""Independent reference for ctune's quantisation (src/quant), written from the formulas of
docs/formats.md#quantisation-bitsandbytes (bitsandbytes LLM.int8, NF4, double quantisation) with numpy/PyTorch from
Debian, sharing no code with ctune.

Conventions fixed here and in ctune alike (bitsandbytes' reference kernels):
  int8:   scb = row absmax; cb = round_half_even(w * (127 / scb)) in fp32; an all-zero row gives 0.
  LLM.int8 matmul: outliers |x| >= threshold; outlier columns = columns with any outlier; row
          stats = row absmax after zeroing the outlier values; ca = round(x * (127 / rs)) with
          whole outlier columns zeroed; y = (ca @ cbᵀ) * rs * scb / 127² + x[:, oc] @ (cb[:, oc] * scb / 127)ᵀ.
  NF4:    absmax per block of the row-major flattening; s = x * fp32(1 / absmax) in fp32; code =
          argmin |s - level| (exact, first index on ties); packed (code[2j] << 4) | code[2j + 1];
          an odd tail pads with code 7; an all-zero block gives absmax 0 and codes 7.
  double quant: offset = fp32(mean of absmax in float64); v = absmax - offset (fp32); blocks of
          256: nested absmax, s = clamp(v * fp32(1 / nested), -1, 1), nearest dynamic-map level;
          dequantised absmax = level * nested + offset in fp32.

Usage: make_quant_reference.py OUT_DIR   (writes OUT_DIR/quant_reference.safetensors)
"""
import json
import os
import struct
import sys

import numpy as np
import torch

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
F32 = np.float32


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8"}
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def dynamic_map():
    """bitsandbytes create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        bounds = torch.linspace(0.1, 1, 2 ** i + 1)  # fp32, as the original
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += (10 ** (i - 6) * means).tolist()
        data += (-(10 ** (i - 6)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), dtype=np.float32)


def nearest(s, levels):
    """Exact nearest level (float64 distances of fp32 values are exact), first index on ties."""
    d = np.abs(s.astype(np.float64)[:, None] - levels.astype(np.float64)[None, :])
    return np.argmin(d, axis=1)


def recip(a):
    """fp32 1/a, 0 where a == 0."""
    with np.errstate(divide="ignore"):
        return np.where(a > 0, F32(1) / a, F32(0)).astype(np.float32)


# ---- int8 -------------------------------------------------------------------------------------
def int8_quant(w):
    scb = np.abs(w).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):
        scale = np.where(scb > 0, F32(127) / scb, F32(0)).astype(np.float32)
    cb = np.round((w * scale[:, None]).astype(np.float32)).astype(np.int8)
    return cb, scb


def llm_int8(x, cb, scb, threshold):
    x = x.astype(np.float32)
    xz, cols = x.copy(), np.zeros(0, dtype=np.int64)
    if threshold > 0:
        out_mask = np.abs(x) >= threshold
        cols = np.nonzero(out_mask.any(axis=0))[0]
        xz[out_mask] = 0
    rs = np.abs(xz).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):
        scale = np.where(rs > 0, F32(127) / rs, F32(0)).astype(np.float32)
    ca = np.round((xz * scale[:, None]).astype(np.float32))
    ca[:, cols] = 0
    c = ca.astype(np.int64) @ cb.astype(np.int64).T                      # exact int32 GEMM
    y = c.astype(np.float64) * rs.astype(np.float64)[:, None] * scb.astype(np.float64)[None, :] / 127.0 ** 2
    if len(cols):
        sub_w = cb[:, cols].astype(np.float64) * scb.astype(np.float64)[:, None] / 127.0
        y += x[:, cols].astype(np.float64) @ sub_w.T
    return y.astype(np.float32), cols


# ---- nf4 / double quant -----------------------------------------------------------------------
def blockwise(flat, bs, levels, clamp):
    n = flat.size
    blocks = (n + bs - 1) // bs
    absmax = np.zeros(blocks, dtype=np.float32)
    codes = np.zeros(n, dtype=np.int64)
    for b in range(blocks):
        seg = flat[b * bs:(b + 1) * bs]
        absmax[b] = np.abs(seg).max()
        s = (seg * recip(absmax[b:b + 1])[0]).astype(np.float32)
        if clamp:
            s = np.clip(s, -1, 1)
        codes[b * bs:b * bs + seg.size] = nearest(s, levels)
    return codes, absmax


def nf4_quant(w, bs, double_quant, dmap):
    flat = w.astype(np.float32).reshape(-1)
    codes, absmax = blockwise(flat, bs, NF4, clamp=False)
    if codes.size % 2:
        codes = np.concatenate([codes, [7]])
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    out = {"packed": packed}
    if not double_quant:
        out["absmax"] = absmax
        deq_absmax = absmax
    else:
        offset = F32(absmax.astype(np.float64).mean())
        v = (absmax - offset).astype(np.float32)
        qcodes, nested = blockwise(v, 256, dmap, clamp=True)
        out["qabsmax"] = qcodes.astype(np.uint8)
        out["nested_absmax"] = nested
        out["offset"] = np.array([offset], dtype=np.float32)
        deq_absmax = (dmap[qcodes] * np.repeat(nested, 256)[:v.size]).astype(np.float32)
        deq_absmax = (deq_absmax + offset).astype(np.float32)
    codes = codes[:flat.size]
    out["deq"] = (NF4[codes] * np.repeat(deq_absmax, bs)[:flat.size]).astype(np.float32).reshape(w.shape)
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(1234)
    t = {}
    dmap = dynamic_map()
    t["dynamic_map"] = dmap

    # int8 weight: a zero row, a row holding +absmax and -absmax exactly.
    w8 = (rng.standard_normal((24, 40)) * 0.3).astype(np.float32)
    w8[5] = 0
    w8[7, 3], w8[7, 10] = 0.9, -0.9
    w8[7] = np.clip(w8[7], -0.9, 0.9)
    cb, scb = int8_quant(w8)
    t.update({"int8.w": w8, "int8.cb": cb, "int8.scb": scb,
              "int8.deq": (cb.astype(np.float32) * scb[:, None] / F32(127)).astype(np.float32)})
    # Activations with two outlier columns (one value 8.0, one exactly -6.0 = -threshold), a value
    # just under the threshold, and an all-zero row.
    x8 = rng.standard_normal((7, 40)).astype(np.float32)
    x8[2, 3] = 8.0
    x8[4, 17] = -6.0
    x8[1, 30] = 5.9
    x8[6] = 0
    y6, cols = llm_int8(x8, cb, scb, 6.0)
    assert list(cols) == [3, 17], cols
    y0, _ = llm_int8(x8, cb, scb, 0.0)
    t.update({"int8.x": x8, "int8.y_t6": y6, "int8.y_t0": y0})

    cases = {
        # 770 values: 12 full blocks + a tail of 2; block 2 all zero; exact ±absmax in block 0.
        "nf4_a": ((10, 77), 64, False),
        # 65 values: an odd count (padding nibble) and a one-element tail block.
        "nf4_b": ((5, 13), 64, False),
        # 625 blocks -> 3 nested blocks (256, 256, 113).
        "nf4_c": ((40, 1000), 64, True),
        # every block's absmax is exactly 1: absmax - offset is all zero (nested absmax 0).
        "nf4_d": ((8, 64), 64, True),
        # 38 blocks of 128 with a short last block.
        "nf4_e": ((16, 300), 128, True),
    }
    for name, (shape, bs, dq) in cases.items():
        w = rng.standard_normal(shape).astype(np.float32)
        flat = w.reshape(-1)
        if name == "nf4_a":
            flat[128:192] = 0
            m = np.abs(flat[:64]).max()
            flat[0], flat[5] = m, -m
        if name == "nf4_d":
            w = np.clip(w, -0.99, 0.99)
            w[:, 11] = 1.0
        q = nf4_quant(w, bs, dq, dmap)
        t[name + ".w"] = w
        for k, v in q.items():
            t[name + "." + k] = v
    write_safetensors(os.path.join(out_dir, "quant_reference.safetensors"), t)
    print(f"wrote {len(t)} tensors to {out_dir}")


if __name__ == "__main__":
    main()
