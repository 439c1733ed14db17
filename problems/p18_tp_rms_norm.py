"""RMSNorm over a hidden dimension that is sharded across ranks (tensor parallel).

Inputs per rank: local_hidden_states [T, H/world] (rank r holds hidden columns r*H/w:(r+1)*H/w),
local_weight [H/world] (the matching slice of the norm weight), variance_epsilon (float).
Output per rank: [T, H/world] = (x * rsqrt(mean over the FULL hidden dim of x^2 + eps)) cast to
the input dtype, times local_weight. Statistics are computed in float32.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allreduce_bytes, check_scale, hypothesis, like, randn, seeded_generator, symmetric

EPS = 1e-6

PROBLEM = ProblemSpec(
    id=18,
    name="tp_rms_norm",
    category="norm",
    description="RMSNorm whose hidden dim is sharded: all-reduce the per-token sum of squares, normalise locally.",
    source="Megatron-LM / vLLM tensor-parallel RMSNorm (e.g. QK-norm over sharded heads)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (2e-2, 2e-2)},
)

SIZES = {"small": {"tokens": 32, "hidden_local": 32}, "large": {"tokens": 8192, "hidden_local": 1024}}


@torch.no_grad()
def solution(local_hidden_states: torch.Tensor, local_weight: torch.Tensor, variance_epsilon: float) -> torch.Tensor:
    world_size = dist.get_world_size()
    x = local_hidden_states.float()
    sum_squares = x.square().sum(dim=-1, keepdim=True)
    dist.all_reduce(sum_squares, op=dist.ReduceOp.SUM)
    variance = sum_squares / (x.shape[-1] * world_size)
    normed = (x * torch.rsqrt(variance + variance_epsilon)).to(local_hidden_states.dtype)
    return local_weight * normed


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    x = randn(gen, (size["tokens"], size["hidden_local"]), device, dtype)
    weight = (1.0 + 0.1 * torch.randn(size["hidden_local"], generator=gen)).to(device=device, dtype=x.dtype)
    return x, weight, EPS


def traffic_bytes(inputs, world_size) -> dict:
    x = inputs[0]
    stats_bytes = x.numel() // x.shape[-1] * 4  # one float32 sum of squares per token
    return symmetric(allreduce_bytes(stats_bytes, world_size))


def _normalise(x_local, weight_local, sum_squares, count, eps):
    normed = (x_local.float() * torch.rsqrt(sum_squares / count + eps)).to(x_local.dtype)
    return weight_local * normed


def global_reference(inputs_per_rank, world_size) -> list:
    x_full = torch.cat([inp[0] for inp in inputs_per_rank], dim=-1)
    eps = inputs_per_rank[0][2]
    variance = x_full.double().square().mean(dim=-1, keepdim=True)
    normed_full = (x_full.double() * torch.rsqrt(variance + eps)).to(x_full.dtype)
    width = inputs_per_rank[0][0].shape[-1]
    return [
        inp[1] * normed_full[..., r * width:(r + 1) * width]
        for r, inp in enumerate(inputs_per_rank)
    ]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    x, weight, eps = inputs_per_rank[rank]
    width = x.shape[-1]
    sums = [inp[0].double().square().sum(-1, keepdim=True) for inp in inputs_per_rank]
    total = torch.stack(sums).sum(0)
    hyps = [
        hypothesis("local_only", _normalise(x, weight, sums[rank], width, eps), detail="statistics of the local shard only"),
        hypothesis("wrong_denominator", _normalise(x, weight, total, width, eps), detail="global sum divided by the local width"),
        hypothesis("no_weight", like(expected, _normalise(x, torch.ones_like(weight), total, width * world_size, eps))),
    ]
    for peer in range(world_size):
        if peer != rank:
            hyps.append(hypothesis("missing_peer", _normalise(x, weight, total - sums[peer], width * world_size, eps), peers=[peer]))
    return hyps
