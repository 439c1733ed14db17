"""MoE token exchange primitive: a variable-size all-to-all of token rows (PKB's signature).

Inputs per rank r: local_tensor [sum_d S[r][d], H] (the rows for destination d are the d-th block,
in rank order), input_split_sizes = S[r] (rows sent to each rank), output_split_sizes = the column
S[.][r] (rows received from each rank), group (None: the world). S is a split matrix shared by all
ranks; its rows and columns all sum to the same token count, so every rank sends and receives as
many rows as it holds, in uneven blocks. Output on rank r: [sum_s S[s][r], H] = the blocks sent to r,
concatenated in source rank order. With no split sizes the blocks are equal.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import alltoall_bytes, check_scale, circulant_splits, hypothesis, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=27,
    name="moe_all2all_primitive",
    category="moe",
    description="Variable-size all-to-all of token rows with per-destination split sizes (MoE dispatch primitive).",
    source="Megatron-LM / veScale MoE all_to_all with input/output split sizes",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},  # pure data movement
    notes="Split sizes are uneven and change with the trial.",
)

SIZES = {"small": {"tokens_per_peer": 6, "hidden": 32}, "large": {"tokens_per_peer": 512, "hidden": 4096}}


@torch.no_grad()
def solution(local_tensor: torch.Tensor, input_split_sizes: list[int] | torch.Tensor | None = None,
             output_split_sizes: list[int] | torch.Tensor | None = None,
             group: dist.ProcessGroup | None = None) -> torch.Tensor:
    world_size = dist.get_world_size(group)
    local_tensor = local_tensor.contiguous()
    if world_size == 1:
        return local_tensor
    if output_split_sizes is None:
        rows = local_tensor.shape[0]
    else:
        rows = int(sum(int(n) for n in output_split_sizes))
    out = local_tensor.new_empty((rows, *local_tensor.shape[1:]))
    dist.all_to_all_single(out, local_tensor, output_split_sizes=output_split_sizes,
                           input_split_sizes=input_split_sizes, group=group)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    splits = circulant_splits(seeded_generator(PROBLEM.id, 0, trial), world_size, size["tokens_per_peer"])
    send = splits[rank]
    recv = [splits[s][rank] for s in range(world_size)]
    local = randn(seeded_generator(PROBLEM.id, rank, trial), (sum(send), size["hidden"]), device, dtype)
    return local, send, recv, None


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(alltoall_bytes(nbytes(inputs[0]), world_size))


def _blocks(inputs):
    local, send = inputs[0], inputs[1]
    return list(local.split(list(send), dim=0))  # block d goes to rank d


def global_reference(inputs_per_rank, world_size) -> list:
    if world_size == 1:
        return [inputs_per_rank[0][0].clone()]
    blocks = [_blocks(inp) for inp in inputs_per_rank]  # blocks[src][dst]
    return [torch.cat([blocks[src][dst] for src in range(world_size)], dim=0) for dst in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    if world_size == 1:
        return []
    blocks = [_blocks(inp) for inp in inputs_per_rank]
    recv = inputs_per_rank[rank][2]
    hyps = []
    start = 0
    for peer in range(world_size):
        rows = recv[peer]
        if peer != rank and rows:
            missing = expected.clone()
            missing[start:start + rows] = 0
            hyps.append(hypothesis("missing_peer", missing, peers=[peer], rows=[start, start + rows]))
        start += rows
    # equal blocks assumed where the splits are uneven: rows land at the wrong offsets
    local = inputs_per_rank[rank][0]
    if local.shape[0] % world_size == 0 and list(inputs_per_rank[rank][1]) != [local.shape[0] // world_size] * world_size:
        equal = [inp[0].chunk(world_size, dim=0)[rank] for inp in inputs_per_rank]
        guess = torch.cat(equal, dim=0)
        if guess.shape == expected.shape:
            hyps.append(hypothesis("equal_splits_assumed", guess, detail="split sizes ignored"))
    reversed_order = torch.cat([blocks[src][rank] for src in reversed(range(world_size))], dim=0)
    if not torch.equal(reversed_order, expected):
        hyps.append(hypothesis("wrong_order", reversed_order, order="reversed"))
    return hyps
