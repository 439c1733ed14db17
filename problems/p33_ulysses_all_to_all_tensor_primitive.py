"""Ulysses' all-to-all primitive: scatter one dim across ranks, gather another.

Inputs per rank: x, scatter_dim (int), gather_dim (int), group (None: the world; PKB's signature). The world holds a global tensor G that is
sharded along gather_dim (rank r holds block r); the output on rank r is block r of G along
scatter_dim, i.e. out = concat over source ranks s of (block r of x_s along scatter_dim), joined
along gather_dim in rank order.
Trials alternate the direction so hard-coded dims show: even trials x [B, S/w, Hh, D] with
(scatter_dim, gather_dim) = (2, 1) (sequence -> heads sharding); odd trials x [B, S, Hh/w, D] with
(1, 2) (heads -> sequence).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import alltoall_bytes, check_scale, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=33,
    name="ulysses_all_to_all_tensor_primitive",
    category="sequence_parallel",
    description="Generic all-to-all that scatters scatter_dim and gathers gather_dim (Ulysses sequence parallelism).",
    source="DeepSpeed-Ulysses / verl ulysses all_to_all_tensor",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},
    notes="Even trials scatter heads and gather sequence; odd trials the reverse.",
)

SIZES = {
    "small": {"batch": 2, "seq_local": 8, "heads_local": 2, "head_dim": 16},
    "large": {"batch": 2, "seq_local": 2048, "heads_local": 4, "head_dim": 128},
}


@torch.no_grad()
def solution(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    world_size = dist.get_world_size(group)
    scatter_dim %= x.dim()
    gather_dim %= x.dim()
    # bring the scattered dim to the front and split it into [world, chunk] so that one
    # all_to_all_single sends chunk j to rank j
    moved = x.movedim(scatter_dim, 0)
    send = moved.reshape(world_size, moved.shape[0] // world_size, *moved.shape[1:]).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    pieces = [piece.movedim(0, scatter_dim) for piece in recv.unbind(0)]  # piece s came from rank s
    return torch.cat(pieces, dim=gather_dim).contiguous()


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    b, s, h, d = size["batch"], size["seq_local"], size["heads_local"], size["head_dim"]
    gen = seeded_generator(PROBLEM.id, rank, trial)
    if trial % 2 == 0:
        return randn(gen, (b, s, h * world_size, d), device, dtype), 2, 1, None
    return randn(gen, (b, s * world_size, h, d), device, dtype), 1, 2, None


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(alltoall_bytes(nbytes(inputs[0]), world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    _, scatter_dim, gather_dim, _ = inputs_per_rank[0]
    whole = torch.cat([inp[0] for inp in inputs_per_rank], dim=gather_dim)
    return [block.contiguous() for block in whole.tensor_split(world_size, dim=scatter_dim)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    _, scatter_dim, gather_dim, _ = inputs_per_rank[0]
    hyps = []
    if world_size > 1:
        # pieces joined in reverse rank order
        pieces = [inp[0].tensor_split(world_size, dim=scatter_dim)[rank] for inp in inputs_per_rank]
        hyps.append(hypothesis("wrong_order", torch.cat(pieces[::-1], dim=gather_dim), order="reversed"))
        # source and destination swapped: this rank's own chunks laid side by side
        own = inputs_per_rank[rank][0].tensor_split(world_size, dim=scatter_dim)
        hyps.append(hypothesis("local_only", torch.cat(own, dim=gather_dim), detail="own chunks, no exchange"))
    return hyps
