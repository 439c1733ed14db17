"""Reduce-scatter (sum) along dim 0: rank r ends with block r of the sum over ranks.

Inputs per rank: x [world_size * rows, cols]. Output on rank r: [rows, cols] =
sum over ranks s of x_s[r*rows:(r+1)*rows].
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, like, nbytes, randn, reducescatter_bytes, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=7,
    name="reducescatter",
    category="collective",
    description="Sum-reduce-scatter of a [world*rows, cols] tensor; rank r keeps reduced block r.",
    source="NCCL ncclReduceScatter as used by ZeRO-2/FSDP gradient sharding",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (6e-2, 2e-2)},  # sum order as in allreduce
)

SIZES = {"small": {"rows": 16, "cols": 96}, "large": {"rows": 1024, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    world_size = dist.get_world_size()
    out = torch.empty((tensor.shape[0] // world_size, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(out, tensor.contiguous(), op=dist.ReduceOp.SUM)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (world_size * size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(reducescatter_bytes(nbytes(inputs[0]), world_size))


def _block(t, index, world_size):
    rows = t.shape[0] // world_size
    return t[index * rows:(index + 1) * rows]


def global_reference(inputs_per_rank, world_size) -> list:
    total = torch.stack([inp[0].double() for inp in inputs_per_rank]).sum(0)
    ref = inputs_per_rank[0][0]
    return [like(ref, _block(total, r, world_size)).contiguous() for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    xs = [inp[0].double() for inp in inputs_per_rank]
    total = torch.stack(xs).sum(0)
    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, _block(xs[rank], rank, world_size)))]
    for peer in range(world_size):
        if peer != rank:
            missing = exp - _block(xs[peer], rank, world_size)
            hyps.append(hypothesis("missing_peer", like(expected, missing), peers=[peer]))
    hyps.append(hypothesis("scaled", like(expected, exp * world_size), factor=float(world_size)))
    hyps.append(hypothesis("scaled", like(expected, exp / world_size), factor=1.0 / world_size))
    for block in range(world_size):
        if block != rank:
            hyps.append(hypothesis("wrong_block", like(expected, _block(total, block, world_size)), block=block))
    return hyps
