"""All-gather into a new leading dim: every rank ends with all ranks' tensors stacked in rank order.

Inputs per rank: tensor [rows, cols]. Output: [world_size, rows, cols] (PKB's reference returns
this shape); out[r] holds rank r's tensor, identical on every rank.
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
    description="All-gather of one dense tensor per rank, stacked into a new leading dim in rank order.",
    source="NCCL ncclAllGather as used by FSDP/ZeRO-3 parameter unsharding",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},  # pure data movement
)

SIZES = {"small": {"rows": 32, "cols": 96}, "large": {"rows": 2048, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    world_size = dist.get_world_size()
    out = torch.empty((world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    # gathered through a flat [world * rows, ...] view: the same bytes, and the shape gloo accepts
    dist.all_gather_into_tensor(out.flatten(0, 1) if tensor.dim() else out, tensor.contiguous())
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    return (randn(gen, (size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(allgather_bytes(nbytes(inputs[0]) * world_size, world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    gathered = torch.stack([inp[0] for inp in inputs_per_rank], dim=0)
    return [gathered.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    xs = [inp[0] for inp in inputs_per_rank]
    hyps = [hypothesis("local_only", torch.stack([xs[rank]] * world_size, dim=0))]
    for peer in range(world_size):
        if peer == rank:
            continue
        missing = expected.clone()
        missing[peer] = 0  # where the peer's block would be
        hyps.append(hypothesis("missing_peer", missing, peers=[peer], block=peer))
    if world_size > 1:
        hyps.append(hypothesis("wrong_order", torch.stack(xs[::-1], dim=0), order="reversed"))
        own_only = torch.zeros_like(expected)
        own_only[rank] = xs[rank]
        hyps.append(hypothesis("self_only", own_only))
        flat = torch.cat(xs, dim=0)  # the concatenated layout [world * rows, cols] of a dim-0 gather
        hyps.append(hypothesis("flat_layout", flat, shape_changes=True,
                               detail="gathered along dim 0 instead of into a new leading dim"))
    return hyps
