#!/usr/bin/env python3
"""Independent reference for ctune's preference objectives, written from TRL's DPOTrainer
(trl/trainer/dpo_trainer.py: _compute_loss) and CPOTrainer with loss_type simpo
(trl/experimental/cpo/cpo_trainer.py: cpo_loss, average_log_prob) in float64 PyTorch, sharing no
code with ctune.

The model is make_train_reference.py's tiny Llama (its own forward, written from transformers'
modeling code). Three preference pairs (prompt shared, responses of different lengths, right
padding) form one batch of six rows, chosen then rejected. Per pair, with pi / ref the summed
log-probabilities of a response's tokens given its prompt:
  sigmoid  -(1 - eps) logsigmoid(beta d) - eps logsigmoid(-beta d)  (d = (pi_c - ref_c) - (pi_r - ref_r); cDPO)
  hinge    relu(1 - beta d)
  ipo      ((pi_c - ref_c) / n_c - (pi_r - ref_r) / n_r - 1 / (2 beta))^2   (n: response tokens)
and SimPO (reference-free; avg the mean log-probability per response token, eps label smoothing):
  simpo    -(1 - eps) logsigmoid(beta z) - eps logsigmoid(-beta z),  z = avg_c - avg_r - gamma / beta
  (rewards beta avg, logps the averages, as TRL's CPOTrainer reports them);
and ORPO (trl/experimental/orpo/orpo_trainer.py: odds_ratio_loss, concatenated_forward):
  orpo     NLL - beta mean logsigmoid(log_odds),  log_odds = (avg_c - avg_r) - (log1mexp(avg_c) - log1mexp(avg_r))
  with NLL the token mean of the chosen rows' cross-entropy over every token (prompt included),
  and its metrics nll_loss, log_odds_ratio (mean logsigmoid), log_odds_chosen (mean log_odds);
the loss is the mean over pairs, and the metrics are TRL's: rewards/chosen = mean beta (pi_c - ref_c),
rewards/rejected, rewards/margins, rewards/accuracies (share of pairs with chosen reward >
rejected), logps/chosen, logps/rejected.

Two cases:
  full  the policy is policy/ (the base plus a small perturbation), the reference the base model/
  lora  the policy is the base with LoRA (r 4, alpha 8, B non-zero) on every linear layer and the
        head; the reference is the base (adapters off)
Writes OUT_DIR/{model/, policy/, lora.safetensors, pairs.json, expected.json, noise.json,
grads_<case>_<loss>.safetensors}. noise.json holds each value's float32 noise (fp32_noise.py).

Usage: make_dpo_reference.py OUT_DIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import make_train_reference as R  # noqa: E402  (the reference model, not ctune)
from fp32_noise import fp32_noise, relative_norm  # noqa: E402

torch.set_default_dtype(torch.float64)
IGNORE = -100
LOSSES = {"sigmoid": dict(beta=0.5, label_smoothing=0.1), "hinge": dict(beta=0.5, label_smoothing=0.0),
          "ipo": dict(beta=0.5, label_smoothing=0.0), "simpo": dict(beta=2.0, label_smoothing=0.1, gamma=0.3),
          "orpo": dict(beta=0.3, label_smoothing=0.0)}
ORPO_METRICS = ["nll_loss", "log_odds_ratio", "log_odds_chosen"]
METRICS = ["rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen", "logps/rejected"]


def make_pairs(gen):
    """Six rows (three pairs: chosen, rejected) of up to 20 tokens, right-padded."""
    V, T = R.CFG["vocab_size"], 20
    rows = []
    for prompt_len, chosen_len, rejected_len in ((5, 6, 9), (8, 10, 4), (3, 12, 12)):
        prompt = torch.randint(1, V, (prompt_len,), generator=gen)
        for n in (chosen_len, rejected_len):
            rows.append((prompt, torch.randint(1, V, (n,), generator=gen)))
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    pos = torch.zeros(len(rows), T, dtype=torch.long)
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for r, (prompt, response) in enumerate(rows):
        seq = torch.cat((prompt, response))
        n = seq.numel()
        ids[r, :n] = seq
        labels[r, prompt.numel():n] = response  # the completion mask: the response's tokens
        pos[r, :n] = torch.arange(n)
        seg[r, :n] = 1
    return dict(ids=ids, labels=labels, pos=pos, seg=seg)


def sequence_logps(W, lora, scale, batch, with_logits=False):
    """Per row: sum over the response's tokens of log p(token | everything before it), and the
    count (and the logits, when asked)."""
    all_logits = R.forward_logits(W, lora, scale, batch)
    logits = all_logits[:, :-1]
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE
    token = torch.log_softmax(logits, -1).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    out = (token * mask).sum(-1), mask.sum(-1).to(logits.dtype)
    return out + (all_logits,) if with_logits else out


def simpo(pi, counts, beta, label_smoothing, gamma):
    """TRL's CPOTrainer with loss_type simpo (cpo_alpha 0): mean over pairs, and its metrics."""
    avg = pi / counts.clamp(min=1.0)
    avg_c, avg_r = avg[0::2], avg[1::2]
    z = beta * (avg_c - avg_r - gamma / beta)
    F = torch.nn.functional
    losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    rc, rr = beta * avg_c.detach(), beta * avg_r.detach()
    metrics = {"rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(), "rewards/margins": (rc - rr).mean(),
               "rewards/accuracies": (rc > rr).to(rc.dtype).mean(), "logps/chosen": avg_c.detach().mean(),
               "logps/rejected": avg_r.detach().mean()}
    return losses.mean(), metrics


def orpo(pi, counts, logits, batch, beta):
    """TRL's ORPOTrainer loss (mean over the batch) and its metrics."""
    avg = pi / counts.clamp(min=1.0)
    avg_c, avg_r = avg[0::2], avg[1::2]

    def log1mexp(x):
        return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))
    log_odds = (avg_c - avg_r) - (log1mexp(avg_c) - log1mexp(avg_r))
    ratio = torch.nn.functional.logsigmoid(log_odds)
    # The chosen rows' CE over every non-padding token, a mean over those tokens.
    labels = torch.where(batch["seg"] != 0, batch["ids"], torch.full_like(batch["ids"], IGNORE))[0::2, 1:]
    nll = torch.nn.functional.cross_entropy(logits[0::2, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                            ignore_index=IGNORE)
    rc, rr = beta * avg_c.detach(), beta * avg_r.detach()
    metrics = {"rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(), "rewards/margins": (rc - rr).mean(),
               "rewards/accuracies": (rc > rr).to(rc.dtype).mean(), "logps/chosen": avg_c.detach().mean(),
               "logps/rejected": avg_r.detach().mean(), "nll_loss": nll.detach(), "log_odds_ratio": ratio.detach().mean(),
               "log_odds_chosen": log_odds.detach().mean()}
    return nll - beta * ratio.mean(), metrics


def dpo(pi, ref, counts, loss_type, beta, label_smoothing):
    """TRL's per-pair loss (mean over pairs) and metrics, pairs as rows (2i, 2i + 1)."""
    pi_c, pi_r = pi[0::2], pi[1::2]
    ref_c, ref_r = ref[0::2], ref[1::2]
    ratio_c, ratio_r = pi_c - ref_c, pi_r - ref_r
    d = ratio_c - ratio_r
    F = torch.nn.functional
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * d) - label_smoothing * F.logsigmoid(-beta * d)
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * d)
    else:
        n_c, n_r = counts[0::2].clamp(min=1.0), counts[1::2].clamp(min=1.0)
        losses = (ratio_c / n_c - ratio_r / n_r - 1 / (2 * beta)) ** 2
    rc, rr = beta * ratio_c.detach(), beta * ratio_r.detach()
    metrics = {"rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(), "rewards/margins": (rc - rr).mean(),
               "rewards/accuracies": (rc > rr).to(rc.dtype).mean(), "logps/chosen": pi_c.detach().mean(),
               "logps/rejected": pi_r.detach().mean()}
    return losses.mean(), metrics


def case_outputs(kind, tensors, batch, loss_type):
    """{loss, metrics..., d loss / d trainable} of one case, in the dtype of `tensors`."""
    opts = LOSSES[loss_type]
    scale = R.ALPHA / R.RANK
    if kind == "full":
        base = {k[len("ref:"):]: v for k, v in tensors.items() if k.startswith("ref:")}
        policy = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if not k.startswith("ref:")}
        with torch.no_grad():
            ref, _ = sequence_logps(base, None, 0.0, batch)
        pi, counts, logits = sequence_logps(policy, None, 0.0, batch, True)
        trainable = policy
    else:
        base = {k: v for k, v in tensors.items() if ".lora_" not in k}
        lora = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if ".lora_" in k}
        with torch.no_grad():
            ref, _ = sequence_logps(base, None, 0.0, batch)  # adapters off: the base
        pi, counts, logits = sequence_logps(base, lora, scale, batch, True)
        trainable = lora
    if loss_type == "simpo":
        loss, metrics = simpo(pi, counts, opts["beta"], opts["label_smoothing"], opts["gamma"])
    elif loss_type == "orpo":
        loss, metrics = orpo(pi, counts, logits, batch, opts["beta"])
    else:
        loss, metrics = dpo(pi, ref, counts, loss_type, opts["beta"], opts["label_smoothing"])
    grads = torch.autograd.grad(loss, list(trainable.values()))
    out = dict(zip(trainable.keys(), grads))
    out["loss"] = loss.detach()
    out.update({m: v for m, v in metrics.items()})
    return out


def write_models(out, gen):
    """The base model/ (the reference), policy/ (the base perturbed: full fine-tuning's policy) and
    lora.safetensors (adapters with B non-zero) under `out`, drawn from `gen`; returns them."""
    W = {}
    for name, shape in R.shapes():
        t = 1.0 + 0.1 * torch.randn(shape, generator=gen) if name.endswith("norm.weight") else 0.2 * torch.randn(shape, generator=gen)
        W[name] = t.to(torch.float32).double()
    policy = {k: (v + 0.05 * torch.randn(v.shape, generator=gen)).to(torch.float32).double() for k, v in W.items()}
    lora = {}
    for name, shape in R.shapes():
        layer = name[: -len(".weight")]
        if layer.split(".")[-1] in R.TARGETS:
            out_f, in_f = shape
            lora[layer + ".lora_A.weight"] = (0.2 * torch.randn(R.RANK, in_f, generator=gen)).to(torch.float32).double()
            lora[layer + ".lora_B.weight"] = (0.2 * torch.randn(out_f, R.RANK, generator=gen)).to(torch.float32).double()
    for sub, weights in (("model", W), ("policy", policy)):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        R.write_safetensors(os.path.join(out, sub, "model.safetensors"), weights)
        with open(os.path.join(out, sub, "config.json"), "w") as f:
            json.dump({k: v for k, v in R.CFG.items() if not k.startswith("_")}, f, indent=2)
    R.write_safetensors(os.path.join(out, "lora.safetensors"), lora)
    return W, policy, lora


def main():
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(23)
    W, policy, lora = write_models(out, gen)
    batch = make_pairs(gen)
    with open(os.path.join(out, "pairs.json"), "w") as f:
        json.dump({k: v.tolist() for k, v in batch.items()}, f)

    expected, noise = {}, {}
    inputs = {"full": {**policy, **{"ref:" + k: v for k, v in W.items()}}, "lora": {**W, **lora}}
    for kind in ("full", "lora"):
        for loss_type in LOSSES:
            name = f"{kind}_{loss_type}"
            values = case_outputs(kind, inputs[kind], batch, loss_type)
            scalars = {k: values[k].item() for k in ["loss"] + METRICS + (ORPO_METRICS if loss_type == "orpo" else [])}
            expected[name] = dict(scalars, objective=loss_type if loss_type in ("simpo", "orpo") else "dpo", **LOSSES[loss_type])
            R.write_safetensors(os.path.join(out, f"grads_{name}.safetensors"),
                                {k: v for k, v in values.items() if k not in scalars})
            # The float32 noise of each value: relative for tensors, absolute for the scalars
            # (rewards/accuracies is a count over three pairs: exact unless a margin is near 0).
            def compute(t, kind=kind, loss_type=loss_type):
                return case_outputs(kind, t, batch, loss_type)
            noise[name] = fp32_noise(compute, inputs[kind], lambda a, b: relative_norm(a, b) if a.dim() else (a - b).abs().item())
            print(name, " ".join(f"{k}={v:.6g}" for k, v in scalars.items()))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "noise.json"), "w") as f:
        json.dump(noise, f, indent=1)


if __name__ == "__main__":
    main()
