"""Row-parallel GEMM followed by a sum all-reduce.

Inputs per rank: a_local [M, K/world] (columns of A) and b_local [K/world, N] (the matching rows of
B), both different per rank. Output on every rank: sum_r a_local_r @ b_local_r = A @ B [M, N].
B is scaled by 1/sqrt(K) so outputs are about unit size.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allreduce_bytes, check_scale, hypothesis, like, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=13,
    name="gemm_allreduce",
    category="tp_gemm",
    description="Row-parallel linear: local partial GEMM over a K shard, then sum all-reduce of [M, N].",
    source="Megatron-LM RowParallelLinear (tensor parallel, no sequence parallelism)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    # bf16: the partial products are rounded to bf16 before the cross-rank sum
    tolerances={"float32": (1e-4, 1e-4), "bfloat16": (4e-2, 2e-2)},
)

SIZES = {
    "small": {"m": 32, "k_local": 16, "n": 48},
    "large": {"m": 4096, "k_local": 1024, "n": 4096},
}


@torch.no_grad()
def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:  # noqa: N803 - PKB's names
    partial = A_local @ B_local
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)
    return partial


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    k = size["k_local"] * world_size
    gen = seeded_generator(PROBLEM.id, rank, trial)
    a_local = randn(gen, (size["m"], size["k_local"]), device, dtype)
    b_local = randn(gen, (size["k_local"], size["n"]), device, dtype, std=1.0 / math.sqrt(k))
    return a_local, b_local


def traffic_bytes(inputs, world_size) -> dict:
    a_local, b_local = inputs
    out_bytes = a_local.shape[0] * b_local.shape[1] * a_local.element_size()
    return symmetric(allreduce_bytes(out_bytes, world_size))


def global_reference(inputs_per_rank, world_size) -> list:
    a = torch.cat([inp[0] for inp in inputs_per_rank], dim=1).double()
    b = torch.cat([inp[1] for inp in inputs_per_rank], dim=0).double()
    out = like(inputs_per_rank[0][0], a @ b)
    return [out.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    partials = [inp[0].double() @ inp[1].double() for inp in inputs_per_rank]
    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, partials[rank]), detail="partial GEMM, no all-reduce")]
    for peer in range(world_size):
        if peer != rank:
            hyps.append(hypothesis("missing_peer", like(expected, exp - partials[peer]), peers=[peer]))
    hyps.append(hypothesis("scaled", like(expected, exp * world_size), factor=float(world_size)))
    hyps.append(hypothesis("scaled", like(expected, exp / world_size), factor=1.0 / world_size))
    return hyps
