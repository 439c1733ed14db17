"""Reduce-scatter over tokens, residual add and RMSNorm, fused (sequence parallelism).

Inputs per rank: partial [T, H] (this rank's partial sums of a row-parallel output, T = world * t),
residual [T/world, H] (this rank's token slice of the residual stream), gamma [H] (identical on all
ranks, rank 0's seed), eps (float).
Outputs on rank r, tokens r*t:(r+1)*t:
    residual_out = sum over ranks of partial[r*t:(r+1)*t] + residual          [t, H], input dtype
    normed       = rmsnorm(residual_out) * gamma (statistics in float32)      [t, H], input dtype
returned as (normed, residual_out).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, like, nbytes, randn, reducescatter_bytes, seeded_generator, symmetric

EPS = 1e-6

PROBLEM = ProblemSpec(
    id=45,
    name="reducescatter_fused_rmsnorm",
    category="norm",
    description="Reduce-scatter of row-parallel partial sums over tokens, then residual add and RMSNorm.",
    source="Megatron-LM sequence parallelism; vLLM fused_add_rms_norm after a TP reduce-scatter",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (2e-5, 2e-5), "bfloat16": (6e-2, 2e-2)},
)

SIZES = {"small": {"tokens_local": 8, "hidden": 64}, "large": {"tokens_local": 512, "hidden": 4096}}


def _rms_norm(h: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    hf = h.float()
    normed = hf * torch.rsqrt(hf.square().mean(dim=-1, keepdim=True) + eps)
    return (normed * gamma.float()).to(h.dtype)


@torch.no_grad()
def solution(partial: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor, eps: float) -> tuple:
    reduced = torch.empty_like(residual)
    dist.reduce_scatter_tensor(reduced, partial.contiguous(), op=dist.ReduceOp.SUM)
    residual_out = reduced + residual
    return _rms_norm(residual_out, gamma, eps), residual_out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    t, hidden = size["tokens_local"], size["hidden"]
    gen = seeded_generator(PROBLEM.id, rank, trial)
    partial = randn(gen, (world_size * t, hidden), device, dtype)
    residual = randn(gen, (t, hidden), device, dtype)
    shared = seeded_generator(PROBLEM.id, 0, trial)  # gamma is replicated
    gamma = (1.0 + 0.1 * torch.randn(hidden, generator=shared)).to(device=device, dtype=partial.dtype)
    return partial, residual, gamma, EPS


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(reducescatter_bytes(nbytes(inputs[0]), world_size))


def _reduced_slice(inputs_per_rank, rank, world_size, skip=()):
    t = inputs_per_rank[0][1].shape[0]
    parts = [inp[0].double()[rank * t:(rank + 1) * t] for s, inp in enumerate(inputs_per_rank) if s not in skip]
    return torch.stack(parts).sum(0)


def global_reference(inputs_per_rank, world_size) -> list:
    outs = []
    for r, (partial, residual, gamma, eps) in enumerate(inputs_per_rank):
        h = (_reduced_slice(inputs_per_rank, r, world_size) + residual.double()).to(partial.dtype)
        hd = h.double()
        normed = hd * torch.rsqrt(hd.square().mean(-1, keepdim=True) + eps) * gamma.double()
        outs.append((normed.to(partial.dtype), h))
    return outs


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    partial, residual, gamma, eps = inputs_per_rank[rank]
    t = residual.shape[0]

    def outputs(reduced):
        h = like(residual, reduced)
        return (_rms_norm(h, gamma, eps), h)

    reduced = _reduced_slice(inputs_per_rank, rank, world_size)
    res = residual.double()
    hyps = [
        hypothesis("local_only", outputs(partial.double()[rank * t:(rank + 1) * t] + res)),
        hypothesis("no_residual", outputs(reduced)),
        hypothesis("averaged", outputs(reduced / world_size + res), factor=1.0 / world_size),
    ]
    for peer in range(world_size):
        if peer != rank:
            hyps.append(hypothesis("missing_peer", outputs(_reduced_slice(inputs_per_rank, rank, world_size, skip=(peer,)) + res), peers=[peer]))
    return hyps
