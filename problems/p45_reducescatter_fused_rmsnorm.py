"""Reduce-scatter of a flat buffer, mean over ranks, then RMSNorm of the rows this rank owns.

PKB's signature and contract. Inputs per rank: rs_input_1d [world * rows * hidden] (this rank's
partial values of the whole flat buffer), gamma [hidden] (identical on all ranks, rank 0's seed),
eps (float). Output on rank r: [rows, hidden] in the input dtype =
    x = (sum over ranks of chunk r of rs_input_1d) / world, viewed as [rows, hidden]
    rmsnorm(x) * gamma, statistics in float32.
RMSNorm is scale invariant, so a missing division by the world size hides in the output (up to
eps); a missing or extra peer does not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, like, nbytes, randn, reducescatter_bytes, seeded_generator, symmetric

EPS = 1e-5

PROBLEM = ProblemSpec(
    id=45,
    name="reducescatter_fused_rmsnorm",
    category="norm",
    description="Reduce-scatter (mean over ranks) of a flat buffer, then RMSNorm of this rank's rows.",
    source="Megatron-LM sequence parallelism; vLLM fused RMSNorm after a TP reduce-scatter",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (2e-5, 2e-5), "bfloat16": (6e-2, 2e-2)},
)

SIZES = {"small": {"rows": 8, "hidden": 64}, "large": {"rows": 512, "hidden": 4096}}


def _rms_norm(rows: torch.Tensor, gamma: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    x = rows.float()
    return (x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps) * gamma.float()).to(dtype)


@torch.no_grad()
def solution(rs_input_1d: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    world_size = dist.get_world_size()
    hidden = gamma.numel()
    chunk = rs_input_1d.numel() // world_size
    reduced = torch.empty(chunk, dtype=rs_input_1d.dtype, device=rs_input_1d.device)
    dist.reduce_scatter_tensor(reduced, rs_input_1d.contiguous(), op=dist.ReduceOp.SUM)
    reduced /= world_size  # the mean, in the input dtype as PKB's reference takes it
    return _rms_norm(reduced.view(chunk // hidden, hidden), gamma, eps, rs_input_1d.dtype)


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    rows, hidden = size["rows"], size["hidden"]
    flat = randn(seeded_generator(PROBLEM.id, rank, trial), (world_size * rows * hidden,), device, dtype)
    shared = seeded_generator(PROBLEM.id, 0, trial)  # gamma is replicated
    gamma = (1.0 + 0.1 * torch.randn(hidden, generator=shared)).to(device=device, dtype=flat.dtype)
    return flat, gamma, EPS


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(reducescatter_bytes(nbytes(inputs[0]), world_size))


def _chunk_sum(inputs_per_rank, rank, world_size, skip=()):
    """Chunk `rank` of the flat buffers summed over the ranks not in `skip`, in float64."""
    chunk = inputs_per_rank[0][0].numel() // world_size
    parts = [inp[0].double()[rank * chunk:(rank + 1) * chunk] for s, inp in enumerate(inputs_per_rank) if s not in skip]
    return torch.stack(parts).sum(0)


def _normed(inputs_per_rank, rank, mean_flat):
    flat, gamma, eps = inputs_per_rank[rank]
    rows = mean_flat.view(-1, gamma.numel())
    normed = rows * torch.rsqrt(rows.square().mean(-1, keepdim=True) + eps) * gamma.double()
    return normed.to(flat.dtype)


def global_reference(inputs_per_rank, world_size) -> list:
    dtype = inputs_per_rank[0][0].dtype
    # the mean rounded to the input dtype first, as the reference holds it before the norm
    return [_normed(inputs_per_rank, r, (_chunk_sum(inputs_per_rank, r, world_size) / world_size).to(dtype).double())
            for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    flat, gamma, eps = inputs_per_rank[rank]
    chunk = flat.numel() // world_size
    mean = _chunk_sum(inputs_per_rank, rank, world_size) / world_size
    hyps = [
        hypothesis("local_only", _normed(inputs_per_rank, rank, flat.double()[rank * chunk:(rank + 1) * chunk])),
        hypothesis("no_norm", like(expected, mean.view(-1, gamma.numel())), detail="the reduced mean, not normalised"),
    ]
    if world_size > 2:  # at two ranks a missing peer leaves this rank's own chunk: local_only
        for peer in range(world_size):
            if peer != rank:
                hyps.append(hypothesis("missing_peer", _normed(inputs_per_rank, rank, _chunk_sum(
                    inputs_per_rank, rank, world_size, skip=(peer,)) / (world_size - 1)), peers=[peer]))
    return hyps
