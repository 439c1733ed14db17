"""Reduce (sum) to rank 0: rank 0 ends with the elementwise sum of all ranks' tensors.

Inputs per rank: x [rows, cols]. Output: on rank 0 the sum over ranks; on the other ranks the
returned tensor is not part of the contract (NCCL and gloo leave different things there), so
`global_reference` gives None for them and they are not checked.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, like, nbytes, randn, seeded_generator, symmetric

DST = 0

PROBLEM = ProblemSpec(
    id=4,
    name="reduce",
    category="collective",
    description="Sum-reduce of one dense tensor per rank onto rank 0; other ranks' outputs unchecked.",
    source="NCCL ncclReduce (e.g. gathering metrics or gradients on one rank)",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (6e-2, 2e-2)},  # sum order as in allreduce
    notes="Only rank 0's output is compared.",
)

SIZES = {"small": {"rows": 64, "cols": 96}, "large": {"rows": 4096, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor, dst: int = DST) -> torch.Tensor:
    out = tensor.clone()
    dist.reduce(out, dst=dst, op=dist.ReduceOp.SUM)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(nbytes(inputs[0]))  # nccl-tests' reduce bus factor is 1


def global_reference(inputs_per_rank, world_size) -> list:
    total = torch.stack([inp[0].double() for inp in inputs_per_rank]).sum(0)
    return [like(inputs_per_rank[0][0], total) if r == DST else None for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    if rank != DST or expected is None:
        return []
    xs = [inp[0].double() for inp in inputs_per_rank]
    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, xs[rank]))]
    for peer in range(world_size):
        if peer != rank:
            hyps.append(hypothesis("missing_peer", like(expected, exp - xs[peer]), peers=[peer]))
    hyps.append(hypothesis("scaled", like(expected, exp * world_size), factor=float(world_size)))
    hyps.append(hypothesis("scaled", like(expected, exp / world_size), factor=1.0 / world_size))
    return hyps
