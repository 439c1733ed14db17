"""Cross-entropy loss over a vocabulary sharded across ranks (Megatron's vocab-parallel loss).

Inputs per rank: vocab_parallel_logits [B, S, V/w] (rank r holds vocab ids r*V/w:(r+1)*V/w),
target [B, S] int64 global vocab ids (identical on all ranks, rank 0's seed), group (None: the
world; PKB's signature).
Output on every rank: loss [B, S] in the logits' dtype (PKB's reference returns that) =
logsumexp over the full vocab - logit[target], computed in float32. The logits must not be
modified (PKB's reference subtracts the max in place; ours does not, and the harness gives every
call fresh inputs).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allreduce_bytes, check_scale, hypothesis, randn, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=73,
    name="vocab_parallel_cross_entropy_loss",
    category="loss",
    description="Per-token cross-entropy with vocab-sharded logits: all-reduced max, sum-exp and target logit.",
    source="Megatron-LM vocab_parallel_cross_entropy (tensor parallel output layer)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-4, 1e-5), "bfloat16": (1e-2, 1e-2)},
    notes="Output in the logits' dtype (PKB's contract), computed in float32.",
)

SIZES = {
    "small": {"batch": 2, "seq": 16, "vocab_local": 64},
    "large": {"batch": 4, "seq": 1024, "vocab_local": 4096},
}


@torch.no_grad()
def solution(vocab_parallel_logits: torch.Tensor, target: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    rank = dist.get_rank(group)
    logits = vocab_parallel_logits.float()
    vocab_local = logits.shape[-1]
    logits_max = logits.amax(dim=-1)
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - logits_max.unsqueeze(-1)

    local_target = target - rank * vocab_local
    owned = (local_target >= 0) & (local_target < vocab_local)
    picked = shifted.gather(-1, local_target.clamp(0, vocab_local - 1).unsqueeze(-1)).squeeze(-1)
    # one all-reduce carries both per-token sums: exp-sum and the (owner-only) target logit
    stats = torch.stack([shifted.exp().sum(dim=-1), torch.where(owned, picked, 0.0)], dim=-1)
    dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=group)
    # PKB's reference returns the loss in the logits' dtype; the math above stays in float32
    return (stats[..., 0].log() - stats[..., 1]).to(vocab_parallel_logits.dtype)


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    shape = (size["batch"], size["seq"])
    logits = randn(seeded_generator(PROBLEM.id, rank, trial), (*shape, size["vocab_local"]), device, dtype, std=2.0)
    shared = seeded_generator(PROBLEM.id, 0, trial)  # targets are the same tokens on every rank
    target = torch.randint(0, size["vocab_local"] * world_size, shape, generator=shared).to(device)
    return logits, target, None


def traffic_bytes(inputs, world_size) -> dict:
    # a max all-reduce (1 float32 per token) and one all-reduce of 2 float32 per token
    tokens = inputs[1].numel()
    return symmetric(allreduce_bytes(tokens * 4, world_size) + allreduce_bytes(tokens * 8, world_size))


def _full_logits(inputs_per_rank):
    return torch.cat([inp[0] for inp in inputs_per_rank], dim=-1).double()


def global_reference(inputs_per_rank, world_size) -> list:
    logits = _full_logits(inputs_per_rank)
    target = inputs_per_rank[0][1]
    loss = (logits.logsumexp(-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)).to(inputs_per_rank[0][0].dtype)
    return [loss.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    logits = _full_logits(inputs_per_rank)
    local, target = inputs_per_rank[rank][:2]
    out_dtype = local.dtype
    local = local.double()
    vocab_local = local.shape[-1]
    local_target = target - rank * vocab_local
    owned = (local_target >= 0) & (local_target < vocab_local)
    local_pick = torch.where(owned, local.gather(-1, local_target.clamp(0, vocab_local - 1).unsqueeze(-1)).squeeze(-1), 0.0)
    global_pick = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    global_lse, local_lse = logits.logsumexp(-1), local.logsumexp(-1)
    return [
        hypothesis("local_only", (local_lse - local_pick).to(out_dtype), detail="no all-reduce at all"),
        hypothesis("target_not_reduced", (global_lse - local_pick).to(out_dtype), detail="target logit taken from this rank only"),
        hypothesis("sumexp_not_reduced", (local_lse - global_pick).to(out_dtype), detail="normaliser over the local vocab slice"),
    ]
