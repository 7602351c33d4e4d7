#!/usr/bin/env python3
"""Independent reference for ctune's KTO objective, written from TRL 1.9's KTOTrainer
(trl/trainer/kto_trainer.py: _prepare_dataset's KL completions, _compute_loss) in float64
PyTorch, sharing no code with ctune.

The model is make_train_reference.py's tiny Llama; the models are written as
make_dpo_reference.py writes them. Six unpaired records (prompt, completion, label) form one
batch. As TRL builds them, each record's KL completion is the previous record's completion
within the batch (the first takes the last: [y_n, y_1, ..., y_{n-1}]), and the batch holds
twelve rows, each record's own (prompt + completion) then its KL row (prompt + KL completion),
right-padded. With pi / ref the summed log-probabilities of a row's completion tokens:
  z          = clamp(mean over the KL rows of (pi - ref), min=0), no gradient (TRL: the policy's
               KL forward runs under no_grad and the mean is detached)
  desirable  = 1 - sigmoid(beta (pi - ref - z))
  undesirable= 1 - sigmoid(beta (z - (pi - ref)))
  loss       = mean over the records of (desirable_weight x desirable | undesirable_weight x undesirable)
and TRL's figures: rewards/chosen = mean beta (pi - ref) over the desirable records,
rewards/rejected likewise, rewards/margins their difference, logps/chosen and logps/rejected the
mean pi, kl = z.

Three cases:
  full          policy/ trained, model/ the frozen reference (the KL estimate comes out below 0 here:
                z clamped to 0)
  full_swapped  model/ trained, policy/ the reference (every log-ratio negated: z > 0)
  lora          the base with LoRA (B non-zero) trained, the base (adapters off) the reference
Writes OUT_DIR/{model/, policy/, lora.safetensors, rows.json, expected.json, noise.json,
grads_<case>.safetensors}; noise.json holds each value's float32 noise (fp32_noise.py).

Usage: make_kto_reference.py OUT_DIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import make_train_reference as R  # noqa: E402  (the reference model, not ctune)
from make_dpo_reference import sequence_logps, write_models  # noqa: E402
from fp32_noise import fp32_noise, relative_norm  # noqa: E402

torch.set_default_dtype(torch.float64)
IGNORE = -100
OPTIONS = dict(beta=0.5, desirable_weight=1.3, undesirable_weight=0.7)
LABELS = [True, False, True, True, False, False]
METRICS = ["rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "kl"]


def make_rows(gen):
    """Twelve rows of up to 24 tokens: per record its prompt + completion, then its prompt + the
    KL completion (TRL's rotation by one within the batch)."""
    V, T = R.CFG["vocab_size"], 24
    prompts, completions = [], []
    for prompt_len, completion_len in ((5, 6), (8, 10), (3, 12), (6, 4), (4, 7), (7, 9)):
        prompts.append(torch.randint(1, V, (prompt_len,), generator=gen))
        completions.append(torch.randint(1, V, (completion_len,), generator=gen))
    kl_completions = [completions[-1]] + completions[:-1]
    rows = []
    for prompt, completion, kl_completion in zip(prompts, completions, kl_completions):
        rows += [(prompt, completion), (prompt, kl_completion)]
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    pos = torch.zeros(len(rows), T, dtype=torch.long)
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for r, (prompt, completion) in enumerate(rows):
        seq = torch.cat((prompt, completion))
        n = seq.numel()
        ids[r, :n] = seq
        labels[r, prompt.numel():n] = completion  # the completion mask
        pos[r, :n] = torch.arange(n)
        seg[r, :n] = 1
    desirable = []
    for label in LABELS:
        desirable += [1 if label else 0, -1]
    return dict(ids=ids, labels=labels, pos=pos, seg=seg), desirable


def kto(pi, ref, beta, desirable_weight, undesirable_weight):
    """TRL's KTO loss (kto loss_type) over rows (own, KL) per record, and its figures."""
    F = torch.nn.functional
    pi_own, ref_own = pi[0::2], ref[0::2]
    pi_kl, ref_kl = pi[1::2].detach(), ref[1::2]  # TRL: the policy's KL forward under no_grad
    z = (pi_kl - ref_kl).mean().detach().clamp(min=0)
    chosen = torch.tensor(LABELS)
    ratio_c, ratio_r = (pi_own - ref_own)[chosen], (pi_own - ref_own)[~chosen]
    chosen_losses = 1 - torch.sigmoid(beta * (ratio_c - z))
    rejected_losses = 1 - torch.sigmoid(beta * (z - ratio_r))
    losses = torch.cat((desirable_weight * chosen_losses, undesirable_weight * rejected_losses), 0)
    rc, rr = beta * ratio_c.detach(), beta * ratio_r.detach()
    metrics = {"rewards/chosen": rc.sum() / len(rc), "rewards/rejected": rr.sum() / len(rr),
               "logps/chosen": pi_own[chosen].detach().sum() / len(rc), "logps/rejected": pi_own[~chosen].detach().sum() / len(rr),
               "kl": z}
    metrics["rewards/margins"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
    raw = (pi_kl - ref_kl).mean().detach()
    return losses.nanmean(), metrics, raw


def case_outputs(kind, tensors, batch):
    """{loss, figures..., d loss / d trainable, raw KL estimate} of one case, in the dtype of `tensors`."""
    scale = R.ALPHA / R.RANK
    if kind in ("full", "full_swapped"):
        base = {k[len("ref:"):]: v for k, v in tensors.items() if k.startswith("ref:")}
        policy = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if not k.startswith("ref:")}
        with torch.no_grad():
            ref, _ = sequence_logps(base, None, 0.0, batch)
        pi, _ = sequence_logps(policy, None, 0.0, batch)
        trainable = policy
    else:
        base = {k: v for k, v in tensors.items() if ".lora_" not in k}
        lora = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if ".lora_" in k}
        with torch.no_grad():
            ref, _ = sequence_logps(base, None, 0.0, batch)  # adapters off: the base
        pi, _ = sequence_logps(base, lora, scale, batch)
        trainable = lora
    loss, metrics, raw = kto(pi, ref, **OPTIONS)
    grads = torch.autograd.grad(loss, list(trainable.values()))
    out = dict(zip(trainable.keys(), grads))
    out["loss"] = loss.detach()
    out.update(metrics)
    out["raw_kl"] = raw
    return out


def main():
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(29)
    W, policy, lora = write_models(out, gen)
    batch, desirable = make_rows(gen)
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump(dict({k: v.tolist() for k, v in batch.items()}, desirable=desirable), f)

    expected, noise = {}, {}
    inputs = {"full": {**policy, **{"ref:" + k: v for k, v in W.items()}},
              "full_swapped": {**W, **{"ref:" + k: v for k, v in policy.items()}},
              "lora": {**W, **lora}}
    for kind in inputs:
        values = case_outputs(kind, inputs[kind], batch)
        scalars = {k: values[k].item() for k in ["loss"] + METRICS}
        expected[kind] = dict(scalars, raw_kl=values["raw_kl"].item(), **OPTIONS)
        R.write_safetensors(os.path.join(out, f"grads_{kind}.safetensors"),
                            {k: v for k, v in values.items() if k not in scalars and k != "raw_kl"})

        def compute(t, kind=kind):
            return case_outputs(kind, t, batch)
        noise[kind] = fp32_noise(compute, inputs[kind], lambda a, b: relative_norm(a, b) if a.dim() else (a - b).abs().item())
        noise[kind].pop("raw_kl")  # shown in expected.json (the clamp's side), not a reported figure
        print(kind, " ".join(f"{k}={v:.6g}" for k, v in expected[kind].items()))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "noise.json"), "w") as f:
        json.dump(noise, f, indent=1)


if __name__ == "__main__":
    main()
