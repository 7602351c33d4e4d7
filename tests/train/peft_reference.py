#!/usr/bin/env python3
"""PEFT conformance, independent of ctune (python3-torch only).

  make OUT_DIR    writes PEFT-layout adapters for the model of make_train_reference.py (which must
                  already be in OUT_DIR/../train-reference/model): lora/ (r=4, alpha=8) and
                  rslora/ (r=4, alpha=8, use_rslora) on all seven projections, keys
                  base_model.model.<module>.lora_{A,B}.weight, and reference.json with the per-token
                  NLL of base+adapter (merged in float64) on fixed ids, and under "noise" how far
                  float32 rounding alone moves those NLLs (largest |dNLL|, tests/fp32_noise.py).
  check MODEL_DIR ADAPTER_DIR SCORES_JSON
                  reads an adapter written by ctune with its own safetensors/JSON parsing, merges it
                  in float64, scores the ids in SCORES_JSON and prints the largest |NLL - ctune's|,
                  then the float32 noise of those NLLs, on one line.
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_train_reference as ref  # noqa: E402  (the independent forward and shapes)
from fp32_noise import fp32_noise, max_abs  # noqa: E402  (imported by make_train_reference's path)

PREFIX = "base_model.model."
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] == "F32", info
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=torch.float32).reshape(info["shape"]).double()
    return out


def nll(weights, ids):
    batch = dict(ids=torch.tensor([ids]), pos=torch.arange(len(ids))[None], seg=torch.ones(1, len(ids), dtype=torch.long))
    logp = torch.log_softmax(ref.forward_logits(weights, None, 0.0, batch)[0], -1)
    return [-logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)]


def nll_noise(base, adapter, scale, ids):
    """The largest |dNLL| that float32 rounding alone causes in nll(merged(...), ids)."""
    def compute(t):
        b = {k: v for k, v in t.items() if not k.startswith(PREFIX)}
        a = {k: v for k, v in t.items() if k.startswith(PREFIX)}
        return {"nll": torch.tensor(nll(merged(b, a, scale), ids))}
    return fp32_noise(compute, {**base, **adapter}, max_abs)["nll"]


def merged(base, adapter, scale):
    W = dict(base)
    for key, A in adapter.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key[len(PREFIX):-len(".lora_A.weight")]
        B = adapter[key.replace("lora_A", "lora_B")]
        W[module + ".weight"] = W[module + ".weight"] + scale * (B @ A)
    return W


def make(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    model_dir = os.path.join(os.path.dirname(os.path.abspath(out_dir)), "train-reference", "model")
    base = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    gen = torch.Generator().manual_seed(99)
    ids = torch.randint(0, ref.CFG["vocab_size"], (40,), generator=gen).tolist()
    result = {"ids": ids, "noise": {}}
    for name, rslora in (("lora", False), ("rslora", True)):
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        r, alpha = 4, 8.0
        adapter = {}
        for key, shape in ref.shapes():
            module = key[: -len(".weight")]
            if module.split(".")[-1] not in PROJECTIONS:
                continue
            out_f, in_f = shape
            adapter[PREFIX + module + ".lora_A.weight"] = (0.3 * torch.randn(r, in_f, generator=gen)).float().double()
            adapter[PREFIX + module + ".lora_B.weight"] = (0.3 * torch.randn(out_f, r, generator=gen)).float().double()
        ref.write_safetensors(os.path.join(d, "adapter_model.safetensors"), adapter)
        config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "train-reference/model",
                  "r": r, "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": PROJECTIONS,
                  "bias": "none", "fan_in_fan_out": False, "use_rslora": rslora, "use_dora": False,
                  "modules_to_save": None, "inference_mode": True, "init_lora_weights": True,
                  "rank_pattern": {}, "alpha_pattern": {}, "revision": None}
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(config, f, indent=2)
        scale = alpha / math.sqrt(r) if rslora else alpha / r
        result[name] = nll(merged(base, adapter, scale), ids)
        result["noise"][name] = nll_noise(base, adapter, scale, ids)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(result, f)


def check(model_dir, adapter_dir, scores_path):
    base = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        config = json.load(f)
    assert config["peft_type"] == "LORA" and config["bias"] == "none" and not config.get("fan_in_fan_out")
    adapter = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    for key, t in adapter.items():
        assert key.startswith(PREFIX) and (".lora_A.weight" in key or ".lora_B.weight" in key), key
        module = key[len(PREFIX):].rsplit(".lora_", 1)[0]
        assert module.split(".")[-1] in config["target_modules"], key
        r = config["r"]
        assert t.shape[0 if ".lora_A." in key else 1] == r, (key, t.shape)
    r, alpha = config["r"], config["lora_alpha"]
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    with open(scores_path) as f:
        scores = json.load(f)
    ours = nll(merged(base, adapter, scale), scores["ids"])
    print(max(abs(a - b) for a, b in zip(ours, scores["nll"])), nll_noise(base, adapter, scale, scores["ids"]))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(*sys.argv[2:5])
