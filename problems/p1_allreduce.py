"""All-reduce (sum): every rank ends with the elementwise sum of all ranks' tensors.

Inputs per rank: x [rows, cols], independent per rank. Output: x summed over ranks, same shape
and dtype, identical on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allreduce_bytes, check_scale, hypothesis, like, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=1,
    name="allreduce",
    category="collective",
    description="Sum-all-reduce of one dense tensor per rank; every rank gets the elementwise sum.",
    source="NCCL ncclAllReduce as used for data-parallel gradients; vLLM custom all-reduce",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    # bf16: each of the n-1 partial sums is rounded to bf16 in an order the candidate chooses, so
    # the error scales with the partial sums' magnitude (about sqrt(n) for unit normals).
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (6e-2, 2e-2)},
    notes="Out of place: the input must not be modified.",
)

SIZES = {"small": {"rows": 64, "cols": 96}, "large": {"rows": 4096, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(allreduce_bytes(nbytes(inputs[0]), world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    total = torch.stack([inp[0].double() for inp in inputs_per_rank]).sum(0)
    out = like(inputs_per_rank[0][0], total)
    return [out.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    xs = [inp[0].double() for inp in inputs_per_rank]
    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, xs[rank]))]
    for peer in range(world_size):
        name = "missing_self" if peer == rank else "missing_peer"
        hyps.append(hypothesis(name, like(expected, exp - xs[peer]), peers=[peer]))
    hyps.append(hypothesis("scaled", like(expected, exp * world_size), factor=float(world_size)))
    hyps.append(hypothesis("scaled", like(expected, exp / world_size), factor=1.0 / world_size))
    return hyps
