"""Log-probability of the target token under a top-k, top-p filtered softmax, vocab sharded across ranks.

Inputs per rank (PKB's signature): vocab_parallel_logits [B, S, V/w] (rank r holds vocab ids
r*V/w:(r+1)*V/w), target [B, S] int64 global ids (identical on all ranks), tp_group (None: the
world), top_k (int or None), top_p (float; 1.0 turns it off).
Output on every rank: [B, S] float32 = log_softmax over the kept logits of the full vocab (the
rest masked to -inf), taken at the target; -inf where the target was filtered out. Kept: the
logits >= the k-th largest, then of those the nucleus: a value stays when the softmax mass of the
kept values at or below it exceeds 1 - top_p (the largest always stays). Computed in float32.
Inputs avoid ties at the top-k boundary: every row gets k planted values (3.0, 3.25, ..., exact in
bf16) above the normal background, which is clamped at 2.5. The planted positions, one in each
stratum of V/k vocab ids, come from rank 0's seed; each rank writes those in its own slice. Half
of the targets are planted positions (finite log-probs), the rest random (mostly -inf).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import allreduce_bytes, check_scale, hypothesis, resolve_dtype, seeded_generator, symmetric

PROBLEM = ProblemSpec(
    id=82,
    name="vocab_parallel_log_prob_topk",
    category="loss",
    description="Target log-prob under top-k filtering with vocab-sharded logits: gather local top-k, global threshold, reduced normaliser.",
    source="verl / vLLM sampler log-probs with tensor-parallel vocab (top-k filtered log_softmax)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (1e-2, 1e-2)},
    notes="Output is float32; -inf marks targets outside the top k.",
)

SIZES = {
    # top_p keeps 3 of the 4 (small) and 6 of the 50 (large) planted values, far from a boundary
    "small": {"batch": 2, "seq": 8, "vocab_local": 32, "top_k": 4, "top_p": 0.7},
    "large": {"batch": 4, "seq": 1024, "vocab_local": 4096, "top_k": 50, "top_p": 0.75},
}


def _nucleus_threshold(top_values: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest value nucleus (top-p) sampling keeps among `top_values` (sorted descending):
    a value stays when the probability mass of the values at or below it exceeds 1 - top_p; the
    largest always stays."""
    probs = top_values.softmax(dim=-1)
    mass_at_or_below = 1.0 - (probs.cumsum(dim=-1) - probs)
    keep = mass_at_or_below > 1.0 - top_p
    keep[..., 0] = True
    return top_values.gather(-1, keep.sum(dim=-1, keepdim=True) - 1)


@torch.no_grad()
def solution(vocab_parallel_logits: torch.Tensor, target: torch.Tensor, tp_group: dist.ProcessGroup | None = None,
             top_k: int | None = None, top_p: float = 1.0) -> torch.Tensor:
    rank, world_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    logits = vocab_parallel_logits.float()
    vocab_local = logits.shape[-1]
    use_k = top_k is not None and top_k > 0
    use_p = top_p is not None and top_p < 1.0
    keep = min(int(top_k), vocab_local * world_size) if use_k else vocab_local * world_size
    # the global top `keep` lies inside the union of every rank's local top `keep`
    local_top = logits.topk(min(keep, vocab_local), dim=-1).values.contiguous()
    gathered = torch.empty((world_size * local_top.shape[0], *local_top.shape[1:]), dtype=local_top.dtype,
                           device=local_top.device)
    dist.all_gather_into_tensor(gathered, local_top, group=tp_group)
    candidates = gathered.view(world_size, *local_top.shape).movedim(0, -2).flatten(-2)  # [..., world * k]
    top_values = candidates.topk(keep, dim=-1).values  # descending
    row_max = top_values[..., :1]
    if use_p:
        threshold = _nucleus_threshold(top_values, top_p)
    elif use_k:
        threshold = top_values[..., -1:]
    else:
        threshold = torch.full_like(row_max, -torch.inf)

    kept = logits >= threshold
    sum_exp = torch.where(kept, (logits - row_max).exp(), 0.0).sum(dim=-1)
    local_target = target - rank * vocab_local
    owned = (local_target >= 0) & (local_target < vocab_local)
    index = local_target.clamp(0, vocab_local - 1).unsqueeze(-1)
    target_logit = logits.gather(-1, index).squeeze(-1)
    target_kept = owned & kept.gather(-1, index).squeeze(-1)
    stats = torch.stack([sum_exp, torch.where(target_kept, target_logit - row_max.squeeze(-1), 0.0), target_kept.float()], dim=-1)
    dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=tp_group)
    log_prob = stats[..., 1] - stats[..., 0].log()
    return torch.where(stats[..., 2] > 0, log_prob, -torch.inf)


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    batch, seq, vocab_local, top_k = size["batch"], size["seq"], size["vocab_local"], size["top_k"]
    vocab = vocab_local * world_size
    gen = seeded_generator(PROBLEM.id, rank, trial)
    logits = torch.randn((batch, seq, vocab_local), generator=gen).clamp(max=2.5)

    shared = seeded_generator(PROBLEM.id, 0, trial)  # planting plan and targets: same on all ranks
    # one planted position per vocab stratum: distinct without sorting a full [B, S, V] tensor
    stratum = vocab // top_k
    offsets = torch.randint(0, stratum, (batch, seq, top_k), generator=shared)
    positions = torch.arange(top_k) * stratum + offsets
    planted = 3.0 + 0.25 * torch.rand((batch, seq, top_k), generator=shared).argsort(dim=-1).float()
    mine = (positions >= rank * vocab_local) & (positions < (rank + 1) * vocab_local)
    local_pos = (positions - rank * vocab_local).clamp(0, vocab_local - 1)
    _plant(logits, local_pos, planted, mine)

    pick = torch.randint(0, top_k, (batch, seq, 1), generator=shared)
    random_target = torch.randint(0, vocab, (batch, seq), generator=shared)
    use_planted = torch.rand((batch, seq), generator=shared) < 0.5
    target = torch.where(use_planted, positions.gather(-1, pick).squeeze(-1), random_target)
    return logits.to(device=device, dtype=resolve_dtype(dtype)), target.to(device), None, top_k, size["top_p"]


def _plant(logits, local_pos, planted, mine):
    # write only the planted values this rank owns; other ranks' positions are left alone
    rows = logits.reshape(-1, logits.shape[-1])
    flat_pos, flat_val, flat_mine = (t.reshape(rows.shape[0], -1) for t in (local_pos, planted, mine))
    row_ids = torch.arange(rows.shape[0])[:, None].expand_as(flat_pos)
    rows[row_ids[flat_mine], flat_pos[flat_mine]] = flat_val[flat_mine]


def traffic_bytes(inputs, world_size) -> dict:
    # every rank's local top-k values (float32) gathered, then one all-reduce of 3 float32 per token
    tokens, top_k = inputs[1].numel(), inputs[3] or inputs[0].shape[-1]
    gather = (world_size - 1) * tokens * top_k * 4
    return symmetric(gather + allreduce_bytes(tokens * 12, world_size))


def _full_logits(inputs_per_rank):
    return torch.cat([inp[0] for inp in inputs_per_rank], dim=-1).double()


def _target_log_prob(logits, target, top_k, top_p=1.0):
    if top_k:
        top_values = logits.topk(top_k, dim=-1).values
        threshold = _nucleus_threshold(top_values, top_p) if top_p < 1.0 else top_values[..., -1:]
        logits = logits.masked_fill(logits < threshold, -torch.inf)
    return logits.log_softmax(-1).gather(-1, target.unsqueeze(-1)).squeeze(-1).float()


def global_reference(inputs_per_rank, world_size) -> list:
    _, target, _, top_k, top_p = inputs_per_rank[0]
    out = _target_log_prob(_full_logits(inputs_per_rank), target, top_k, top_p)
    return [out.clone() for _ in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    logits = _full_logits(inputs_per_rank)
    local, target, _, top_k, top_p = inputs_per_rank[rank]
    vocab_local = local.shape[-1]
    hyps = [hypothesis("no_topk_filter", _target_log_prob(logits, target, 0)),
            hypothesis("no_top_p_filter", _target_log_prob(logits, target, top_k), detail="top-k applied, top-p not")]
    if world_size > 1:
        # top-k and softmax over this rank's slice only; targets elsewhere are -inf
        local_target = target - rank * vocab_local
        owned = (local_target >= 0) & (local_target < vocab_local)
        local_lp = _target_log_prob(local.double(), local_target.clamp(0, vocab_local - 1), top_k, top_p)
        hyps.append(hypothesis("local_only", torch.where(owned, local_lp, -torch.inf)))
    return hyps
