"""All-to-all with equal splits along dim 0.

Inputs per rank: x [world_size * rows, cols]; block j (rows j*rows:(j+1)*rows) is addressed to
rank j. Output on rank r: [world_size * rows, cols] whose block j is rank j's block r.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import alltoall_bytes, check_scale, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=8,
    name="alltoall",
    category="collective",
    description="All-to-all of equal [rows, cols] blocks: block j of rank i goes to block i of rank j.",
    source="NCCL all-to-all (ncclSend/ncclRecv groups) as used for expert parallelism",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},
)

SIZES = {"small": {"rows": 16, "cols": 96}, "large": {"rows": 1024, "cols": 4096}}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(tensor)
    dist.all_to_all_single(out, tensor.contiguous())
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    # PKB's layout: [world, rows, cols], block d goes to rank d
    return (randn(gen, (world_size, size["rows"], size["cols"]), device, dtype),)


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(alltoall_bytes(nbytes(inputs[0]), world_size))


def _blocks(t, world_size):
    return list(t.chunk(world_size, dim=0))


def global_reference(inputs_per_rank, world_size) -> list:
    blocks = [_blocks(inp[0], world_size) for inp in inputs_per_rank]  # blocks[src][dst]
    return [torch.cat([blocks[src][dst] for src in range(world_size)], dim=0) for dst in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    own = inputs_per_rank[rank][0]
    rows = own.shape[0] // world_size
    hyps = [hypothesis("local_only", own.clone(), detail="output equals this rank's input")]
    for peer in range(world_size):
        if peer != rank:
            missing = expected.clone()
            missing[peer * rows:(peer + 1) * rows] = 0
            hyps.append(hypothesis("missing_peer", missing, peers=[peer], rows=[peer * rows, (peer + 1) * rows]))
    if world_size > 1:
        # the sender-side block index mirrored (block ws-1-r instead of r): a common index slip
        blocks = [_blocks(inp[0], world_size) for inp in inputs_per_rank]
        mirrored = torch.cat([blocks[src][world_size - 1 - rank] for src in range(world_size)], dim=0)
        if world_size - 1 - rank != rank:
            hyps.append(hypothesis("wrong_block", mirrored, block=world_size - 1 - rank))
    return hyps
