#!/usr/bin/env python3
"""The Hugging Face transformers + PEFT peer of ctune's GPU training step, for scripts/gpu_check.sh.

The same random checkpoint ctune trains (config.json + safetensors written by `ctune init`),
loaded by transformers' LlamaForCausalLM in bf16 with its SDPA attention, LoRA from PEFT (fp32
adapter weights, PEFT's default), torch.autocast("cuda", bfloat16), torch.optim.AdamW over the
trainable parameters, clip_grad_norm_ at 1.0 (ctune's default): the loop a user writes. Rows
are full (random token ids, no padding), as ctune's rows of long documents are.

Modes (one JSON line on stdout each):
  bench_hf_peft.py step --model DIR --seq T --batch B --steps N --rank R
      median tokens/s over steps 2..N and the peak of torch.cuda.max_memory_allocated
      (reset after loading, as ctune resets its own).
  bench_hf_peft.py gemm [--size N]
      the best bf16 N x N x N matmul rate on the GPU (FLOP/s): the denominator of MFU.
"""
import argparse
import json
import statistics
import time

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def step_mode(a):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    try:
        model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="sdpa")
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = get_peft_model(model.cuda(), LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                                    target_modules=TARGETS, task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, 256, (a.batch, a.seq), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # waits for the step, as ctune's loss read does
        times.append(time.perf_counter() - t0)
    timed = times[1:] or times
    print(json.dumps({"tokens_per_s": a.batch * a.seq / statistics.median(timed),
                      "peak_bytes": torch.cuda.max_memory_allocated(), "first_loss": losses[0]}))


def gemm_mode(a):
    x = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    best = 0.0
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            x @ y
        end.record()
        torch.cuda.synchronize()
        best = max(best, 10 * 2 * a.size ** 3 / (start.elapsed_time(end) / 1e3))
    print(json.dumps({"dtype": "bf16", "size": a.size, "flops_per_s": best}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("step")
    s.add_argument("--model", required=True)
    s.add_argument("--seq", type=int, default=2048)
    s.add_argument("--batch", type=int, default=4)
    s.add_argument("--steps", type=int, default=10)
    s.add_argument("--rank", type=int, default=16)
    gm = sub.add_parser("gemm")
    gm.add_argument("--size", type=int, default=8192)
    a = p.parse_args()
    step_mode(a) if a.mode == "step" else gemm_mode(a)


if __name__ == "__main__":
    main()
