#!/usr/bin/env python3
"""Independent reference for ctune's GRPO loss, written from TRL's GRPOTrainer
(trl/trainer/grpo_trainer.py: the advantages of _generate_and_score_completions with
multi_objective_aggregation sum_then_normalize, and _compute_loss with importance_sampling_level
token) in float64 PyTorch, sharing no code with ctune.

The model is make_train_reference.py's tiny Llama (its own forward, written from transformers'
modeling code). Two prompts with three completions each (one group per prompt) form one batch of
six rows, right-padded; each row's completion tokens are its targets. Given each completion's
reward, and per completion token the log-probability under the policy that sampled it (old) and
under the reference (ref):
  advantages  A = r - mean_group(r), divided by (std + 1e-4) with std the group's (group), the
              batch's (batch) or not at all (none); std with Bessel's correction (TRL's nanstd)
  logp        log_softmax(logits / temperature)[token]  (TRL divides the logits by the temperature)
  weight      w = exp(logp - old) per token (importance_sampling_level token), or per completion
              exp(mean over its tokens of logp - old) (sequence, GSPO); old = logp.detach() when
              TRL computes none (num_iterations 1)
  per token   grpo, bnpo, dr_grpo, dapo: -min(min(w, delta) A, clamp(w, 1 - eps_low, 1 + eps_high) A)
              cispo: -clamp(w, max=eps_high).detach() A logp
              times the top-entropy mask (entropy >= its (1 - q) quantile over the completion
              tokens) when top_entropy_quantile q < 1, plus beta (exp(ref - logp) - (ref - logp) - 1);
              the loss less entropy_coef times the trained tokens' mean entropy (with its gradient:
              over all completion tokens for dapo and cispo, each micro-batch's mean averaged
              otherwise)
  loss        grpo: mean over rows of each row's token mean; dapo, cispo: sum / all completion
              tokens; dr_grpo: sum / (rows x max_completion_length); bnpo: each micro-batch's token
              mean, averaged over the micro-batches (one group each here: the only loss type
              whose value depends on the micro-batches)
and TRL's metrics: kl and entropy (of softmax(logits / temperature)) per completion token;
clip_ratio/low_mean ((w < 1 - eps_low) & (A < 0)), clip_ratio/high_mean ((w > 1 + eps_high) &
(A > 0)), clip_ratio/region_mean (either), or cispo_clip_ratio ((w > eps_high) & (A > 0)), per
completion token, or per completion at the sequence level.

Cases: full fine-tuning (policy/ the base plus a perturbation, the reference the base model/) and
LoRA (the base with adapters, r 4, alpha 8, on every linear layer and the head; the reference the
base, adapters off). Writes OUT_DIR/{model/, policy/, lora.safetensors, batch.json, expected.json,
noise.json, grads_<case>.safetensors}; noise.json holds each value's float32 noise (fp32_noise.py).

RLOO (TRL's RLOOTrainer, rloo_trainer.py: _generate_and_score_completions and _compute_loss):
the reward less beta times the completion's summed first-order KL (old - ref), the leave-one-out
baseline (the mean of the group's other rewards), optionally the advantages standardised over the
batch; w = exp(sum over the completion of logp - old), -min(w A, clip(w) A) averaged over the
completions; kl the per-token mean of old - ref, the clip ratios per completion.

Usage: make_grpo_reference.py OUT_DIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import make_dpo_reference as D  # noqa: E402  (its models: base, perturbed policy, LoRA)
import make_train_reference as R  # noqa: E402  (the reference model, not ctune)
from fp32_noise import fp32_noise, relative_norm  # noqa: E402

torch.set_default_dtype(torch.float64)
IGNORE = -100
G = 3  # completions per prompt
MAX_COMPLETION = 16
REWARDS = [1.0, 0.0, 0.25, 2.0, 2.0, -1.0]  # two groups of three (no advantage exactly 0: its sign would be noise)
# name: (kind, loss_type (TRL), aggregation (ctune before loss_type), scale_rewards, beta, epsilon, epsilon_high, temperature,
#        old given) and the options beyond, as TRL names them
CASES = {
    "full_grpo_group_kl": ("full", "grpo", "sequence", "group", 0.04, 0.2, 0.2, 0.7, True, {}),
    "full_dapo_batch": ("full", "dapo", "token", "batch", 0.0, 0.2, 0.28, 1.0, True, {}),
    "full_drgrpo_none": ("full", "dr_grpo", "fixed", "none", 0.1, 0.2, 0.2, 0.9, True, {}),
    "full_dapo_on_policy": ("full", "dapo", "token", "group", 0.0, 0.2, 0.2, 1.0, False, {}),
    "lora_grpo_group_kl": ("lora", "grpo", "sequence", "group", 0.04, 0.2, 0.3, 0.8, True, {}),
    "lora_dapo_group": ("lora", "dapo", "token", "group", 0.0, 0.2, 0.2, 1.0, True, {}),
    # loss_type x importance_sampling_level: the rest of the ten
    "full_bnpo_token": ("full", "bnpo", None, "group", 0.04, 0.2, 0.25, 0.9, True, {}),
    "full_cispo_token": ("full", "cispo", None, "group", 0.0, 0.2, 1.15, 1.0, True, {}),
    "full_grpo_sequence": ("full", "grpo", None, "group", 0.04, 0.1, 0.1, 0.8, True, {"importance_sampling_level": "sequence"}),
    "full_bnpo_sequence": ("full", "bnpo", None, "batch", 0.0, 0.1, 0.12, 1.0, True, {"importance_sampling_level": "sequence"}),
    "full_drgrpo_sequence": ("full", "dr_grpo", None, "group", 0.0, 0.1, 0.1, 1.0, True, {"importance_sampling_level": "sequence"}),
    "full_dapo_sequence": ("full", "dapo", None, "group", 0.1, 0.1, 0.1, 0.9, True, {"importance_sampling_level": "sequence"}),
    "full_cispo_sequence": ("full", "cispo", None, "group", 0.0, 0.2, 1.05, 1.0, True, {"importance_sampling_level": "sequence"}),
    "lora_grpo_sequence": ("lora", "grpo", None, "group", 0.04, 0.1, 0.1, 0.8, True, {"importance_sampling_level": "sequence"}),
    # two-sided clipping and the top-entropy tokens
    "full_dapo_delta": ("full", "dapo", None, "group", 0.0, 0.2, 0.2, 1.0, True, {"delta": 1.25}),
    "full_dapo_top_entropy": ("full", "dapo", None, "group", 0.04, 0.2, 0.2, 0.9, True, {"top_entropy_quantile": 0.4}),
    "lora_cispo_top_entropy": ("lora", "cispo", None, "group", 0.0, 0.2, 1.1, 1.0, True, {"top_entropy_quantile": 0.25}),
    # the entropy bonus (entropy_coef), with and without the top-entropy tokens
    "full_dapo_entropy_coef": ("full", "dapo", None, "group", 0.0, 0.2, 0.2, 0.9, True, {"entropy_coef": 0.05}),
    "full_grpo_entropy_coef_top": ("full", "grpo", None, "group", 0.04, 0.2, 0.2, 0.8, True, {"entropy_coef": 0.1, "top_entropy_quantile": 0.5}),
    "full_bnpo_entropy_coef": ("full", "bnpo", None, "group", 0.0, 0.2, 0.2, 1.0, True, {"entropy_coef": 0.05}),
    "lora_dapo_entropy_coef": ("lora", "dapo", None, "group", 0.0, 0.2, 0.2, 1.0, True, {"entropy_coef": -0.05}),
}
# RLOO (TRL's RLOOTrainer): name: (kind, beta, epsilon, epsilon_high, temperature, normalize_advantages)
RLOO_CASES = {
    "full_rloo_kl": ("full", 0.05, 0.2, 0.2, 1.0, False),
    "full_rloo_normalized": ("full", 0.0, 0.2, 0.28, 0.8, True),
    "lora_rloo_kl": ("lora", 0.1, 0.2, 0.2, 0.9, False),
}
METRICS = ["kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio"]


def make_batch(gen):
    """Six rows: two prompts, three completions each (lengths differ), right-padded to 22."""
    V, T = R.CFG["vocab_size"], 22
    rows = []
    for prompt_len, lengths in ((5, (6, 9, 2)), (8, (12, 4, 14))):
        prompt = torch.randint(1, V, (prompt_len,), generator=gen)
        for n in lengths:
            rows.append((prompt, torch.randint(1, V, (n,), generator=gen)))
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    pos = torch.zeros(len(rows), T, dtype=torch.long)
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for r, (prompt, completion) in enumerate(rows):
        seq = torch.cat((prompt, completion))
        n = seq.numel()
        ids[r, :n] = seq
        labels[r, prompt.numel():n] = completion
        pos[r, :n] = torch.arange(n)
        seg[r, :n] = 1
    return dict(ids=ids, labels=labels, pos=pos, seg=seg)


def nanstd(x, dim=None):
    """TRL's nanstd: the sample standard deviation (Bessel's correction)."""
    mean = x.mean() if dim is None else x.mean(dim, keepdim=True)
    var = ((x - mean) ** 2).mean() if dim is None else ((x - mean) ** 2).mean(dim)
    n = x.numel() if dim is None else x.shape[dim]
    return (var * n / (n - 1)).sqrt()


def advantages(rewards, scale):
    grouped = rewards.view(-1, G)
    mean = grouped.mean(1).repeat_interleave(G)
    if scale == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(grouped, 1).repeat_interleave(G)
    adv = rewards - mean
    return adv / (std + 1e-4) if scale != "none" else adv


def per_token(W, lora, scale, batch, temperature):
    """TRL's _get_per_token_logps_and_entropies over the completion positions, [B, T-1] each."""
    logits = R.forward_logits(W, lora, scale, batch)[:, :-1] / temperature
    labels = batch["labels"][:, 1:]
    logp_all = torch.log_softmax(logits, -1)
    logps = logp_all.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logps, entropy, (labels != IGNORE).to(logits.dtype)


def grpo_loss(logps, entropy, mask, old, ref, adv, loss_type, beta, eps_low, eps_high, extra):
    old = logps.detach() if old is None else old
    log_ratio = logps - old
    sequence = extra.get("importance_sampling_level", "token") == "sequence"
    if sequence:
        log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        log_w = log_ratio
    coef_1 = torch.exp(log_w)
    a = adv.unsqueeze(1)
    if loss_type == "cispo":
        loss_t = -torch.clamp(coef_1, max=eps_high).detach() * a * logps
    else:
        coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
        capped = torch.clamp(coef_1, max=extra["delta"]) if "delta" in extra else coef_1
        loss_t = -torch.min(capped * a, coef_2 * a)
    q = extra.get("top_entropy_quantile", 1.0)
    trained = mask
    if q < 1.0:
        threshold = torch.quantile(entropy[mask.bool()], 1 - q)
        trained = ((entropy * mask >= threshold) & mask.bool()).to(mask.dtype)
        loss_t = loss_t * trained
    metrics = {}
    if beta != 0:
        kl = torch.exp(ref - logps) - (ref - logps) - 1
        loss_t = loss_t + beta * kl
        metrics["kl"] = (kl * mask).sum() / mask.sum()
    if loss_type == "grpo":
        loss = ((loss_t * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type in ("dapo", "cispo"):
        loss = (loss_t * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "bnpo":  # micro-batches of one group each, averaged (gradient accumulation)
        halves = [slice(g * G, (g + 1) * G) for g in range(mask.shape[0] // G)]
        loss = sum((loss_t[h] * mask[h]).sum() / mask[h].sum().clamp(min=1.0) for h in halves) / len(halves)
    else:
        loss = (loss_t * mask).sum() / (loss_t.size(0) * MAX_COMPLETION)
    c = extra.get("entropy_coef", 0.0)
    if c != 0:  # TRL's entropy bonus: the trained tokens' mean entropy, as each loss type normalises it
        if loss_type in ("dapo", "cispo"):
            bonus = (entropy * trained).sum() / mask.sum().clamp(min=1.0)
        elif loss_type == "bnpo":
            halves = [slice(g * G, (g + 1) * G) for g in range(mask.shape[0] // G)]
            bonus = sum((entropy[h] * trained[h]).sum() / trained[h].sum().clamp(min=1.0) for h in halves) / len(halves)
        else:
            bonus = (entropy * trained).sum() / trained.sum().clamp(min=1.0)
        loss = loss - c * bonus

    def clip_mean(flags):  # TRL's global_masked_mean: per completion when the weights are
        flags = flags.to(mask.dtype)
        return flags.mean() if sequence else (flags * mask).sum() / mask.sum()
    if loss_type == "cispo":
        metrics["cispo_clip_ratio"] = clip_mean((coef_1 > eps_high) & (a > 0))
    else:
        low = (coef_1 < 1 - eps_low) & (a < 0)
        high = (coef_1 > 1 + eps_high) & (a > 0)
        metrics.update({"clip_ratio/low_mean": clip_mean(low), "clip_ratio/high_mean": clip_mean(high),
                        "clip_ratio/region_mean": clip_mean(low | high)})
    metrics["entropy"] = (entropy * mask).sum() / mask.sum()
    return loss, {k: v.detach() for k, v in metrics.items()}


def rloo_loss(logps, entropy, mask, old, ref, rewards, beta, eps_low, eps_high, normalize):
    """RLOOTrainer: the KL (first order, old - ref, summed per completion) taken from the reward,
    the leave-one-out baseline, the sequence-level clipped surrogate averaged over completions."""
    rewards = rewards.clone()
    if beta != 0:
        rewards = rewards - beta * ((old - ref) * mask).sum(-1)
    grouped = rewards.view(-1, G)
    baselines = ((grouped.sum(1, keepdim=True) - grouped) / (G - 1)).view(-1)
    adv = rewards - baselines
    if normalize:
        adv = (adv - adv.mean()) / (nanstd(adv) + 1e-4)
    coef_1 = torch.exp((logps * mask).sum(1) - (old * mask).sum(1))
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    loss = (-torch.min(coef_1 * adv, coef_2 * adv)).mean()
    low, high = (coef_1 < 1 - eps_low) & (adv < 0), (coef_1 > 1 + eps_high) & (adv > 0)
    metrics = {"entropy": (entropy * mask).sum() / mask.sum(), "clip_ratio/low_mean": low.double().mean(),
               "clip_ratio/high_mean": high.double().mean(), "clip_ratio/region_mean": (low | high).double().mean()}
    if beta != 0:
        metrics["kl"] = ((old - ref) * mask).sum() / mask.sum()
    return loss, {k: v.detach() for k, v in metrics.items()}


def case_outputs(name, tensors, batch):
    rloo = name in RLOO_CASES
    if rloo:
        kind, beta, eps, eps_high, temperature, normalize = RLOO_CASES[name]
        old_given = True
    else:
        kind, loss_type, _, scale_rewards, beta, eps, eps_high, temperature, old_given, extra = CASES[name]
    scale = R.ALPHA / R.RANK
    if kind == "full":
        base = {k[len("ref:"):]: v for k, v in tensors.items() if k.startswith("ref:")}
        trainable = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if k.startswith("w:")}
        policy = {k[len("w:"):]: v for k, v in trainable.items()}
        lora = None
    else:
        base = {k: v for k, v in tensors.items() if ".lora_" not in k and not k.startswith("old")}
        trainable = {k: v.clone().requires_grad_(True) for k, v in tensors.items() if ".lora_" in k}
        policy, lora = base, trainable
    with torch.no_grad():
        ref, _, _ = per_token(base, None, 0.0, batch, temperature)
    logps, entropy, mask = per_token(policy, lora, scale, batch, temperature)
    old = tensors["old_shift"] + logps.detach() if old_given else None  # the sampling policy: near this one
    if rloo:
        loss, metrics = rloo_loss(logps, entropy, mask, old, ref, tensors["rewards"], beta, eps, eps_high, normalize)
    else:
        adv = advantages(tensors["rewards"], scale_rewards)
        loss, metrics = grpo_loss(logps, entropy, mask, old, ref, adv, loss_type, beta, eps, eps_high, extra)
    grads = torch.autograd.grad(loss, list(trainable.values()))
    out = {k[len("w:"):] if k.startswith("w:") else k: g for k, g in zip(trainable.keys(), grads)}
    out["loss"] = loss.detach()
    out.update(metrics)
    out["old"] = old.detach() if old is not None else torch.zeros(())
    return out


def main():
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(29)
    W, policy, lora = D.write_models(out, gen)
    batch = make_batch(gen)
    rewards = torch.tensor(REWARDS)
    # The old policy's log-probabilities: the policy's moved by up to +-0.4 nats per token, so
    # ratios fall on both sides of the clip range.
    old_shift = (torch.rand(batch["ids"].shape[0], batch["ids"].shape[1] - 1, generator=gen) - 0.5) * 0.8
    old_shift = old_shift.to(torch.float32).double()
    with open(os.path.join(out, "batch.json"), "w") as f:
        json.dump({k: v.tolist() for k, v in batch.items()}, f)

    expected, noise = {}, {}
    common = {"rewards": rewards, "old_shift": old_shift}
    inputs = {"full": {**{"w:" + k: v for k, v in policy.items()}, **{"ref:" + k: v for k, v in W.items()}, **common},
              "lora": {**W, **lora, **common}}
    for name in list(CASES) + list(RLOO_CASES):
        values = case_outputs(name, inputs[CASES[name][0] if name in CASES else RLOO_CASES[name][0]], batch)
        scalars = {k: values[k].item() for k in ["loss"] + sorted(k for k in values if k in METRICS)}
        if name in CASES:
            kind, loss_type, aggregation, scale_rewards, beta, eps, eps_high, temperature, old_given, extra = CASES[name]
            options = dict(loss_type=loss_type, aggregation=aggregation, scale_rewards=scale_rewards, old_given=old_given,
                           micro_batches=2 if loss_type == "bnpo" else 1, **extra)
        else:
            kind, beta, eps, eps_high, temperature, normalize = RLOO_CASES[name]
            options = dict(rloo=True, normalize_advantages=normalize, old_given=True, scale_rewards="group", loss_type="grpo")
        expected[name] = dict(scalars, kind=kind, beta=beta, epsilon=eps, epsilon_high=eps_high, temperature=temperature,
                              rewards=REWARDS, num_generations=G, max_new_tokens=MAX_COMPLETION, old=values["old"].tolist(), **options)
        R.write_safetensors(os.path.join(out, f"grads_{name}.safetensors"),
                            {k: v for k, v in values.items() if k not in scalars and k != "old"})

        def compute(t, name=name):
            v = case_outputs(name, t, batch)
            del v["old"]
            return v
        noise[name] = fp32_noise(compute, inputs[kind], lambda a, b: relative_norm(a, b) if a.dim() else (a - b).abs().item())
        print(name, " ".join(f"{k}={v:.6g}" for k, v in scalars.items()))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "noise.json"), "w") as f:
        json.dump(noise, f, indent=1)


if __name__ == "__main__":
    main()
