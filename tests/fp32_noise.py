"""How far float32 rounding alone moves a computation: the yardstick for the tolerances of
ctune's fp32 results against the float64 references of the test suite (docs/testing.md).

The reference scripts compute every golden value in float64. ctune computes in float32, so its
results differ from them by the rounding of one fp32 evaluation: a difference whose size is a
property of the computation (how much it amplifies a relative perturbation of ~2^-24 in its
inputs and intermediate results), not of the machine. fp32_noise() measures that size directly:
it evaluates the same computation in float32 `runs` times, each time with every floating-point
input moved by one ulp up or down at random (so that the roundings differ from run to run as
they differ between two fp32 implementations), and returns the root-mean-square distance of
those evaluations from the float64 result, per output. A test then accepts ctune's distance up
to a fixed multiple of it (kNoiseFactor in tests/support/margins.h).
"""
import math

import torch


def flip_last_bit(t, gen):
    """t (float32) with every element moved one ulp up or down, at random."""
    up = torch.rand(t.shape, generator=gen) < 0.5
    inf = torch.full_like(t, math.inf)
    return torch.nextafter(t, torch.where(up, inf, -inf))


def relative_norm(a, b):
    """||a - b|| / ||b||: the error of a whole tensor relative to its size."""
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def max_abs(a, b):
    """max |a - b| over all elements."""
    return (a - b).abs().max().item()


def fp32_noise(compute, inputs, metric, runs=8, seed=12345):
    """{name: RMS over `runs` float32 evaluations of metric(result32, result64)}.

    compute(tensors) -> {name: tensor}: evaluates in the dtype of `tensors` (and of the default
    dtype, which is set to it for the call). inputs: {name: float64 tensor}, values exact in
    float32. metric(a, b) -> float, with a and b in float64.
    """
    def evaluate(tensors, dtype):
        saved = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            return {k: torch.as_tensor(v).detach().to(torch.float64) for k, v in compute(tensors).items()}
        finally:
            torch.set_default_dtype(saved)

    exact = evaluate({k: v.to(torch.float64) for k, v in inputs.items()}, torch.float64)
    squares = {k: 0.0 for k in exact}
    gen = torch.Generator().manual_seed(seed)
    for _ in range(runs):
        perturbed = {k: flip_last_bit(v.to(torch.float32), gen) for k, v in inputs.items()}
        rounded = evaluate(perturbed, torch.float32)
        for k in exact:
            squares[k] += metric(rounded[k], exact[k]) ** 2
    return {k: math.sqrt(s / runs) for k, s in squares.items()}
