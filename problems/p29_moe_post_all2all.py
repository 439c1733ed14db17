"""MoE combine: return expert outputs to their source ranks and sum them with the routing weights.

The inverse of problem 27's fixed-capacity layout. Experts: num_experts = world * E_local; global
expert e lives on rank e // E_local. Inputs per rank r:
    expert_out      [E_local, world, C, H]  outputs of r's local experts; [e, s, c] belongs to the
                                            c-th token (in token order) that rank s routed to
                                            global expert r*E_local + e. Padding slots hold random
                                            values: they must be ignored.
    expert_ids      [T, K] int64            this rank's own routing (K distinct experts per token)
    routing_weights [T, K] float32          this rank's combine weights
    num_experts     int
    capacity        int                     C; a token's k-th choice whose position in its
                                            bucket is >= C was dropped and contributes nothing
Output on rank r: out [T, H] (dtype of expert_out), out[t] = sum_k w[t,k] * (expert output for
(t, k)), accumulated in float32.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import (
    check_scale,
    hypothesis,
    like,
    moe_capacity,
    moe_routing,
    moe_slot_positions,
    randn,
    seeded_generator,
    symmetric,
)

PROBLEM = ProblemSpec(
    id=29,
    name="moe_post_all2all",
    category="moe",
    description="Top-k MoE combine: all-to-all expert outputs back from fixed-capacity buffers, weighted sum per token.",
    source="DeepEP combine / Megatron-LM MoE token dispatcher (token unpermutation)",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (2e-2, 2e-2)},
    notes="Capacity = ceil(1.25 * T * K / num_experts), as in problem 27.",
)

SIZES = {
    "small": {"tokens": 48, "hidden": 32, "topk": 2, "experts_per_rank": 2},
    "large": {"tokens": 2048, "hidden": 4096, "topk": 2, "experts_per_rank": 4},
}


@torch.no_grad()
def solution(
    expert_out: torch.Tensor,
    expert_ids: torch.Tensor,
    routing_weights: torch.Tensor,
    num_experts: int,
    capacity: int,
) -> torch.Tensor:
    tokens = expert_ids.shape[0]
    hidden = expert_out.shape[-1]
    # [E_local, dest, C, H] -> grouped by destination (source of the tokens) for the exchange
    send = expert_out.transpose(0, 1).contiguous()
    back = torch.empty_like(send)  # [expert rank, E_local, C, H] == [num_experts, C, H]
    dist.all_to_all_single(back, send)
    back = back.view(num_experts, capacity, hidden)

    flat_expert, flat_token, position = moe_slot_positions(expert_ids, num_experts)
    kept = position < capacity
    weights = routing_weights.reshape(-1)[kept].float()
    rows = back[flat_expert[kept], position[kept]].float() * weights[:, None]
    out = torch.zeros((tokens, hidden), dtype=torch.float32, device=expert_out.device)
    out.index_add_(0, flat_token[kept], rows)
    return out.to(expert_out.dtype)


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    num_experts = size["experts_per_rank"] * world_size
    capacity = moe_capacity(size["tokens"], size["topk"], num_experts)
    gen = seeded_generator(PROBLEM.id, rank, trial)
    expert_out = randn(gen, (size["experts_per_rank"], world_size, capacity, size["hidden"]), device, dtype)
    expert_ids = moe_routing(gen, size["tokens"], size["topk"], num_experts, device)
    routing_weights = torch.rand((size["tokens"], size["topk"]), generator=gen)
    routing_weights = (routing_weights / routing_weights.sum(1, keepdim=True)).to(device)
    return expert_out, expert_ids, routing_weights, num_experts, capacity


def traffic_bytes(inputs, world_size) -> dict:
    # this rank's kept assignments; (world-1)/world of them live on other ranks under uniform routing
    expert_out, expert_ids, _, num_experts, capacity = inputs
    counts = torch.bincount(expert_ids.reshape(-1).cpu(), minlength=num_experts).clamp(max=capacity)
    row_bytes = expert_out.shape[-1] * expert_out.element_size()
    return symmetric(int(counts.sum()) * row_bytes * (world_size - 1) // world_size)


def _combine(inputs_per_rank, rank, world_size, weighted=True, owners=None):
    """out[t] for `rank`'s tokens, written as loops over tokens so it shares no code with solution."""
    expert_out0, expert_ids, routing_weights, num_experts, capacity = inputs_per_rank[rank]
    experts_per_rank = num_experts // world_size
    tokens, topk = expert_ids.shape
    out = torch.zeros((tokens, expert_out0.shape[-1]), dtype=torch.float64, device=expert_out0.device)
    seen = [0] * num_experts  # tokens of this rank already placed in each expert's bucket
    for t in range(tokens):
        for k in range(topk):
            expert = int(expert_ids[t, k])
            slot = seen[expert]
            seen[expert] += 1
            owner = expert // experts_per_rank
            if slot >= capacity or (owners is not None and owner not in owners):
                continue
            value = inputs_per_rank[owner][0][expert % experts_per_rank, rank, slot].double()
            out[t] += value * (float(routing_weights[t, k]) if weighted else 1.0)
    return like(expert_out0, out)


def global_reference(inputs_per_rank, world_size) -> list:
    return [_combine(inputs_per_rank, r, world_size) for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    hyps = [hypothesis("unweighted", _combine(inputs_per_rank, rank, world_size, weighted=False))]
    if world_size > 1:
        hyps.append(hypothesis("local_only", _combine(inputs_per_rank, rank, world_size, owners={rank}),
                               detail="only experts on this rank contributed"))
    for peer in range(world_size):
        if peer != rank:
            owners = set(range(world_size)) - {peer}
            hyps.append(hypothesis("missing_peer", _combine(inputs_per_rank, rank, world_size, owners=owners), peers=[peer]))
    return hyps
