"""Ulysses: gather the sequence, scatter the heads, and drop sequence padding.

Inputs per rank: x [B, S_pad/w, Hh, D] (rank r holds sequence positions r*S_pad/w:(r+1)*S_pad/w,
all heads), seq_dim = 1, head_dim = 2, group = None (the world), unpadded_dim_size = S (the true sequence length; S_pad is S
rounded up to a multiple of world; the padded positions, at the end of the last rank's shard, are
zero). Output on rank r: [B, S, Hh/w, D] = the whole unpadded sequence for heads
r*Hh/w:(r+1)*Hh/w. With unpadded_dim_size 0 or a multiple of world nothing is dropped.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import alltoall_bytes, check_scale, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=36,
    name="ulysses_gather_seq_scatter_heads",
    category="sequence_parallel",
    description="Ulysses all-to-all from sequence-sharded to head-sharded activations, removing sequence padding.",
    source="DeepSpeed-Ulysses / verl gather_seq_scatter_heads",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},
)

SIZES = {
    "small": {"batch": 2, "seq_local": 8, "heads_local": 2, "head_dim": 16},
    "large": {"batch": 2, "seq_local": 2048, "heads_local": 4, "head_dim": 128},
}


@torch.no_grad()
def solution(x: torch.Tensor, seq_dim: int, head_dim: int, group: dist.ProcessGroup | None = None,
             unpadded_dim_size: int = 0) -> torch.Tensor:
    world_size = dist.get_world_size(group)
    heads = x.movedim(head_dim, 0)
    send = heads.reshape(world_size, heads.shape[0] // world_size, *heads.shape[1:]).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    out = torch.cat([piece.movedim(0, head_dim) for piece in recv.unbind(0)], dim=seq_dim)
    if unpadded_dim_size and unpadded_dim_size % world_size != 0:
        out = out.narrow(seq_dim, 0, unpadded_dim_size)
    return out.contiguous()


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    b, s, h, d = size["batch"], size["seq_local"], size["heads_local"], size["head_dim"]
    gen = seeded_generator(PROBLEM.id, rank, trial)
    x = randn(gen, (b, s, h * world_size, d), device, dtype)
    padding = 1 + trial % (world_size - 1) if world_size > 1 else 0
    unpadded = s * world_size - padding
    if rank == world_size - 1 and padding:
        x[:, s - padding:] = 0  # padded tail of the sequence
    return x, 1, 2, None, unpadded


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(alltoall_bytes(nbytes(inputs[0]), world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    _, seq_dim, head_dim, _, unpadded = inputs_per_rank[0]
    sequence = torch.cat([inp[0] for inp in inputs_per_rank], dim=seq_dim)[:, :unpadded]
    return [block.contiguous() for block in sequence.tensor_split(world_size, dim=head_dim)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    _, seq_dim, head_dim, _, unpadded = inputs_per_rank[0]
    sequence = torch.cat([inp[0] for inp in inputs_per_rank], dim=seq_dim)
    kept = sequence.tensor_split(world_size, dim=head_dim)[rank].contiguous()
    hyps = [hypothesis("padding_kept", kept, shape_changes=kept.shape != expected.shape)]
    if world_size > 1:
        reversed_seq = torch.cat([inp[0] for inp in inputs_per_rank[::-1]], dim=seq_dim)[:, :unpadded]
        hyps.append(hypothesis("wrong_order", reversed_seq.tensor_split(world_size, dim=head_dim)[rank].contiguous(), order="reversed"))
    return hyps
