"""All-gather along dim 0: every rank ends with all ranks' tensors concatenated in rank order.

Inputs per rank: x [rows, cols]. Output: [world_size * rows, cols]; rows r*rows:(r+1)*rows hold
rank r's x, identical on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allgather_bytes, check_scale, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=2,
    name="allgather",
    category="collective",
    description="All-gather of one dense tensor per rank, concatenated along dim 0 in rank order.",
    source="NCCL ncclAllGather as used by FSDP/ZeRO-3 parameter unsharding",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},  # pure data movement
)

SIZES = {"small": {"rows": 32, "cols": 96}, "large": {"rows": 2048, "cols": 4096}}


@torch.no_grad()
def solution(x: torch.Tensor) -> torch.Tensor:
    world_size = dist.get_world_size()
    out = torch.empty((world_size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.contiguous())
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(allgather_bytes(nbytes(inputs[0]) * world_size, world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    gathered = torch.cat([inp[0] for inp in inputs_per_rank], dim=0)
    return [gathered.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    xs = [inp[0] for inp in inputs_per_rank]
    rows = xs[0].shape[0]
    hyps = [hypothesis("local_only", torch.cat([xs[rank]] * world_size, dim=0))]
    for peer in range(world_size):
        if peer == rank:
            continue
        missing = expected.clone()
        missing[peer * rows:(peer + 1) * rows] = 0  # where the peer's block would be
        hyps.append(hypothesis("missing_peer", missing, peers=[peer], rows=[peer * rows, (peer + 1) * rows]))
    if world_size > 1:
        hyps.append(hypothesis("wrong_order", torch.cat(xs[::-1], dim=0), order="reversed"))
        own_only = torch.zeros_like(expected)
        own_only[rank * rows:(rank + 1) * rows] = xs[rank]
        hyps.append(hypothesis("self_only", own_only))
    return hyps
