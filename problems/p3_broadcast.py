"""Broadcast from rank 0: every rank ends with rank 0's tensor.

Inputs per rank: x [rows, cols]. Every rank's x is drawn from its own seed, so a rank that keeps
its own data (a no-op) is told apart from a correct broadcast. Output: rank 0's x on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=3,
    name="broadcast",
    category="collective",
    description="Broadcast of one dense tensor from rank 0 to all ranks (out of place).",
    source="NCCL ncclBroadcast as used for parameter initialisation in DDP",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},
    notes="src is 0 in every trial (PKB's default).",
)

SIZES = {"small": {"rows": 64, "cols": 96}, "large": {"rows": 4096, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    out = tensor.clone()
    dist.broadcast(out, src=src)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    # nccl-tests' broadcast bus factor is 1: a pipelined ring moves the payload once per link.
    return symmetric(nbytes(inputs[0]))


def global_reference(inputs_per_rank, world_size) -> list:
    return [inputs_per_rank[0][0].clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    if rank == 0:
        return []  # the source's answer is its own input: nothing to tell apart
    hyps = [hypothesis("local_only", inputs_per_rank[rank][0].clone())]
    for peer in range(1, world_size):
        if peer != rank:
            hyps.append(hypothesis("wrong_source", inputs_per_rank[peer][0].clone(), peers=[peer]))
    hyps.append(hypothesis("unwritten_zero", torch.zeros_like(expected)))
    return hyps
