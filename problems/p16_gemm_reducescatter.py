"""Row-parallel GEMM followed by a sum reduce-scatter along the rows (M).

Inputs per rank: a_local [M, K/world], b_local [K/world, N] (different per rank), M = world * m.
Output on rank r: rows r*m:(r+1)*m of A @ B = sum_s a_local_s @ b_local_s, i.e. [M/world, N].
B is scaled by 1/sqrt(K) so outputs are about unit size.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import check_scale, hypothesis, like, randn, reducescatter_bytes, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=16,
    name="gemm_reducescatter",
    category="tp_gemm",
    description="Row-parallel linear with sequence parallelism: partial GEMM, then reduce-scatter over M.",
    source="Megatron-LM RowParallelLinear with sequence parallelism; PyTorch async-TP matmul_reduce_scatter",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-4, 1e-4), "bfloat16": (4e-2, 2e-2)},
)

SIZES = {
    "small": {"m_local": 8, "k_local": 16, "n": 48},
    "large": {"m_local": 512, "k_local": 1024, "n": 4096},
}


@torch.no_grad()
def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:  # noqa: N803 - PKB's names
    world_size = dist.get_world_size()
    partial = A_local @ B_local
    out = torch.empty((partial.shape[0] // world_size, partial.shape[1]), dtype=partial.dtype, device=partial.device)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    return out


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    k = size["k_local"] * world_size
    gen = seeded_generator(PROBLEM.id, rank, trial)
    a_local = randn(gen, (size["m_local"] * world_size, size["k_local"]), device, dtype)
    b_local = randn(gen, (size["k_local"], size["n"]), device, dtype, std=1.0 / math.sqrt(k))
    return a_local, b_local


def traffic_bytes(inputs, world_size) -> dict:
    a_local, b_local = inputs
    partial_bytes = a_local.shape[0] * b_local.shape[1] * a_local.element_size()
    return symmetric(reducescatter_bytes(partial_bytes, world_size))


def _rows(t, index, world_size):
    m = t.shape[0] // world_size
    return t[index * m:(index + 1) * m]


def global_reference(inputs_per_rank, world_size) -> list:
    a = torch.cat([inp[0] for inp in inputs_per_rank], dim=1).double()
    b = torch.cat([inp[1] for inp in inputs_per_rank], dim=0).double()
    full = a @ b
    ref = inputs_per_rank[0][0]
    return [like(ref, _rows(full, r, world_size)).contiguous() for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    partials = [inp[0].double() @ inp[1].double() for inp in inputs_per_rank]
    full = torch.stack(partials).sum(0)
    exp = expected.double()
    hyps = [hypothesis("local_only", like(expected, _rows(partials[rank], rank, world_size)))]
    for peer in range(world_size):
        if peer != rank:
            missing = exp - _rows(partials[peer], rank, world_size)
            hyps.append(hypothesis("missing_peer", like(expected, missing), peers=[peer]))
    hyps.append(hypothesis("scaled", like(expected, exp * world_size), factor=float(world_size)))
    hyps.append(hypothesis("scaled", like(expected, exp / world_size), factor=1.0 / world_size))
    for block in range(world_size):
        if block != rank:
            hyps.append(hypothesis("wrong_block", like(expected, _rows(full, block, world_size)), block=block))
    return hyps
