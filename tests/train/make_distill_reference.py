#!/usr/bin/env python3
"""Independent reference for ctune's distillation loss (objective.name distill), written from
TRL 1.9's GKDTrainer (trl/experimental/gkd/gkd_trainer.py: generalized_jsd_loss and compute_loss)
in float64 PyTorch, sharing no code with ctune.

The models are make_dpo_reference.py's (make_train_reference.py's tiny Llama). Six rows of
prompt + completion, right-padded, the completion's tokens the targets (-100 elsewhere). As GKD's
compute_loss, position t's logits of the student and of the teacher (in eval mode, no gradient)
are compared for every target label t + 1, at temperature 1, with F.kl_div(input, target,
log_target=True) = exp(target) (target - input):
  beta 0        kl_div(student, teacher)                    forward KL(teacher || student)
  beta 1        kl_div(teacher, student)                    reverse KL(student || teacher)
  else          m = logsumexp(student + log(1 - beta), teacher + log(beta))
                beta kl_div(m, teacher) + (1 - beta) kl_div(m, student)
summed over the vocabulary and the targets, divided by the number of targets (batchmean over the
masked tokens, num_items_in_batch the same count).

Cases: full_beta0, full_beta05, full_beta1 (the student policy/ trained, the teacher the base
model/), lora_beta05 (the base with LoRA on every linear layer and the head trained, the teacher
policy/). A student distilled from itself (loss 0, zero gradients) is a closed form the C++ test
checks without a reference. Writes OUT_DIR/{model/, policy/, lora.safetensors, rows.json, expected.json,
noise.json, grads_<case>.safetensors}; noise.json holds each value's float32 noise (fp32_noise.py).

Usage: make_distill_reference.py OUT_DIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import make_train_reference as R  # noqa: E402  (the reference model, not ctune)
from make_dpo_reference import write_models  # noqa: E402
from fp32_noise import fp32_noise, relative_norm  # noqa: E402

torch.set_default_dtype(torch.float64)
IGNORE = -100
CASES = {"full_beta0": ("full", 0.0), "full_beta05": ("full", 0.5), "full_beta1": ("full", 1.0),
         "lora_beta05": ("lora", 0.5)}


def make_rows(gen):
    """Six rows of up to 24 tokens: a prompt and its completion each."""
    V, T = R.CFG["vocab_size"], 24
    rows = []
    for prompt_len, completion_len in ((5, 6), (8, 10), (3, 12), (6, 4), (4, 7), (7, 9)):
        rows.append((torch.randint(1, V, (prompt_len,), generator=gen), torch.randint(1, V, (completion_len,), generator=gen)))
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    pos = torch.zeros(len(rows), T, dtype=torch.long)
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for r, (prompt, completion) in enumerate(rows):
        n = prompt.numel() + completion.numel()
        ids[r, :n] = torch.cat((prompt, completion))
        labels[r, prompt.numel():n] = completion
        pos[r, :n] = torch.arange(n)
        seg[r, :n] = 1
    return dict(ids=ids, labels=labels, pos=pos, seg=seg)


def kl_div(inp, target):
    """F.kl_div(inp, target, reduction="none", log_target=True), written out."""
    return target.exp() * (target - inp)


def generalized_jsd(student_logits, teacher_logits, labels, beta):
    """GKD's generalized_jsd_loss with the shifted logits and labels, batchmean over the targets."""
    s = torch.log_softmax(student_logits, -1)
    t = torch.log_softmax(teacher_logits, -1)
    if beta == 0:
        jsd = kl_div(s, t)
    elif beta == 1:
        jsd = kl_div(t, s)
    else:
        b = torch.tensor(beta)
        m = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), 0)
        jsd = b * kl_div(m, t) + (1 - b) * kl_div(m, s)
    mask = labels != IGNORE
    return jsd[mask].sum() / mask.sum()


def case_outputs(kind, beta, tensors, batch):
    """{loss, d loss / d trainable} of one case, in the dtype of `tensors`."""
    scale = R.ALPHA / R.RANK
    teacher = {k[len("teacher:"):]: v for k, v in tensors.items() if k.startswith("teacher:")}
    own = {k: v for k, v in tensors.items() if not k.startswith("teacher:")}
    if kind == "lora":
        base = {k: v for k, v in own.items() if ".lora_" not in k}
        trainable = {k: v.clone().requires_grad_(True) for k, v in own.items() if ".lora_" in k}
        student = R.forward_logits(base, trainable, scale, batch)
    else:
        trainable = {k: v.clone().requires_grad_(True) for k, v in own.items()}
        student = R.forward_logits(trainable, None, 0.0, batch)
    with torch.no_grad():
        teacher_logits = R.forward_logits(teacher, None, 0.0, batch)
    loss = generalized_jsd(student[:, :-1], teacher_logits[:, :-1], batch["labels"][:, 1:], beta)
    grads = torch.autograd.grad(loss, list(trainable.values()))
    out = dict(zip(trainable.keys(), grads))
    out["loss"] = loss.detach()
    return out


def main():
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(31)
    W, policy, lora = write_models(out, gen)
    batch = make_rows(gen)
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump({k: v.tolist() for k, v in batch.items()}, f)
    inputs = {"full": {**policy, **{"teacher:" + k: v for k, v in W.items()}},
              "lora": {**W, **lora, **{"teacher:" + k: v for k, v in policy.items()}}}
    expected, noise = {}, {}
    for name, (kind, beta) in CASES.items():
        values = case_outputs(kind, beta, inputs[kind], batch)
        expected[name] = dict(loss=values["loss"].item(), beta=beta, kind=kind)
        R.write_safetensors(os.path.join(out, f"grads_{name}.safetensors"), {k: v for k, v in values.items() if k != "loss"})

        def compute(t, kind=kind, beta=beta):
            return case_outputs(kind, beta, t, batch)
        noise[name] = fp32_noise(compute, inputs[kind], lambda a, b: relative_norm(a, b) if a.dim() else (a - b).abs().item())
        print(name, f"loss={expected[name]['loss']:.6g}")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "noise.json"), "w") as f:
        json.dump(noise, f, indent=1)


if __name__ == "__main__":
    main()
