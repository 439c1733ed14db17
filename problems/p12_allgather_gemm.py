"""All-gather of A's column shards, then GEMM with a replicated B.

Inputs per rank: a_local [M, K/world] (rank r holds columns r*K/w:(r+1)*K/w of A) and b [K, N],
identical on every rank (drawn from rank 0's seed). Output on every rank: A @ B [M, N], where
A = concat(a_local of all ranks, dim=1). B is scaled by 1/sqrt(K) so outputs are about unit size.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allgather_bytes, check_scale, hypothesis, like, nbytes, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=12,
    name="allgather_gemm",
    category="tp_gemm",
    description="A is sharded along K across ranks; gather A along dim 1 and multiply by replicated B.",
    source="Megatron-LM / PyTorch async-TP all-gather + matmul (sequence-parallel column-parallel linear)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-4, 1e-4), "bfloat16": (2e-2, 2e-2)},
)

SIZES = {
    "small": {"m": 32, "k_local": 16, "n": 48},
    "large": {"m": 4096, "k_local": 1024, "n": 2048},
}


@torch.no_grad()
def solution(A_local: torch.Tensor, B: torch.Tensor) -> torch.Tensor:  # noqa: N803 - PKB's names
    world_size = dist.get_world_size()
    m, k_local = A_local.shape
    gathered = torch.empty((world_size * m, k_local), dtype=A_local.dtype, device=A_local.device)
    dist.all_gather_into_tensor(gathered, A_local.contiguous())
    # all_gather_into_tensor concatenates shards along dim 0; A's shards are column blocks
    a_full = gathered.view(world_size, m, k_local).permute(1, 0, 2).reshape(m, world_size * k_local)
    return a_full @ B


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    k = size["k_local"] * world_size
    a_local = randn(seeded_generator(PROBLEM.id, rank, trial), (size["m"], size["k_local"]), device, dtype)
    shared = seeded_generator(PROBLEM.id, 0, trial)  # B is replicated: rank 0's seed everywhere
    b = randn(shared, (k, size["n"]), device, dtype, std=1.0 / math.sqrt(k))
    return a_local, b


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(allgather_bytes(nbytes(inputs[0]) * world_size, world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    a = torch.cat([inp[0] for inp in inputs_per_rank], dim=1).double()
    b = inputs_per_rank[0][1].double()
    out = like(inputs_per_rank[0][0], a @ b)
    return [out.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    shards = [inp[0].double() for inp in inputs_per_rank]
    b = inputs_per_rank[rank][1].double()
    k_local = shards[0].shape[1]
    m = shards[0].shape[0]

    def partial(p):
        return shards[p] @ b[p * k_local:(p + 1) * k_local]

    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, partial(rank)), detail="own shard times its rows of B")]
    for peer in range(world_size):
        if peer != rank:
            hyps.append(hypothesis("missing_peer", like(expected, exp - partial(peer)), peers=[peer]))
    if world_size > 1:
        # shards stacked along dim 0 (what all_gather_into_tensor returns) and reshaped as if they
        # were column blocks: the classic layout slip
        wrong_a = torch.cat(shards, dim=0).reshape(m, world_size * k_local)
        hyps.append(hypothesis("gather_layout", like(expected, wrong_a @ b)))
    return hyps
