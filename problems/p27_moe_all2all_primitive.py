"""MoE token dispatch with a fixed-capacity layout (expert parallelism, top-k routing).

Experts: num_experts = world * E_local; global expert e lives on rank e // E_local as local expert
e % E_local. Inputs per rank s:
    tokens      [T, H]          this rank's tokens
    expert_ids  [T, K] int64    top-k routing, K distinct experts per token (drawn from the
                                generator with a per-rank skew, so bucket counts vary by rank)
    num_experts int
    capacity    int             C, slots per (expert, source rank) bucket
Layout of the outputs on rank r:
    recv        [E_local, world, C, H]  recv[e, s, c] is the c-th token (in token order) that rank s
                                        routed to global expert r*E_local + e; tokens past C are
                                        dropped (GShard-style); unused slots are zero.
    recv_counts [E_local, world] int64  valid slots per bucket: min(tokens routed, C).
Returned as (recv, recv_counts).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import (
    check_scale,
    hypothesis,
    moe_capacity,
    moe_routing,
    moe_slot_positions,
    randn,
    seeded_generator,
    symmetric,
)

PROBLEM = ProblemSpec(
    id=27,
    name="moe_all2all_primitive",
    category="moe",
    description="Top-k MoE token dispatch into fixed-capacity [E_local, world, C, H] expert buffers via all-to-all.",
    source="DeepEP / Megatron-LM MoE token dispatcher (all-to-all), GShard capacity layout",
    has_compute=False,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-6, 1e-6), "bfloat16": (1e-6, 1e-6)},  # tokens are copied, not combined
    notes="Capacity = ceil(1.25 * T * K / num_experts); overflow tokens are dropped in token order.",
)

SIZES = {
    "small": {"tokens": 48, "hidden": 32, "topk": 2, "experts_per_rank": 2},
    "large": {"tokens": 2048, "hidden": 4096, "topk": 2, "experts_per_rank": 4},
}


@torch.no_grad()
def solution(tokens: torch.Tensor, expert_ids: torch.Tensor, num_experts: int, capacity: int) -> tuple:
    world_size = dist.get_world_size()
    experts_per_rank = num_experts // world_size
    hidden = tokens.shape[1]
    flat_expert, flat_token, position = moe_slot_positions(expert_ids, num_experts)
    kept = position < capacity
    # send buffer grouped by destination rank: [world, E_local, C, H] == [num_experts, C, H]
    send = tokens.new_zeros((num_experts, capacity, hidden))
    send[flat_expert[kept], position[kept]] = tokens[flat_token[kept]]
    send_counts = torch.bincount(flat_expert, minlength=num_experts).clamp(max=capacity)

    recv = torch.empty_like(send)  # [source rank, E_local, C, H] after the exchange
    dist.all_to_all_single(recv, send)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)

    recv = recv.view(world_size, experts_per_rank, capacity, hidden).transpose(0, 1).contiguous()
    recv_counts = recv_counts.view(world_size, experts_per_rank).t().contiguous()
    return recv, recv_counts


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    num_experts = size["experts_per_rank"] * world_size
    gen = seeded_generator(PROBLEM.id, rank, trial)
    tokens = randn(gen, (size["tokens"], size["hidden"]), device, dtype)
    expert_ids = moe_routing(gen, size["tokens"], size["topk"], num_experts, device)
    capacity = moe_capacity(size["tokens"], size["topk"], num_experts)
    return tokens, expert_ids, num_experts, capacity


def traffic_bytes(inputs, world_size) -> dict:
    # Only real (kept) tokens must cross; traffic_bytes does not know the rank, so the share bound
    # for other ranks is taken as (world-1)/world of them (exact on average for uniform routing).
    tokens, expert_ids, num_experts, capacity = inputs
    counts = torch.bincount(expert_ids.reshape(-1).cpu(), minlength=num_experts).clamp(max=capacity)
    kept = int(counts.sum())
    row_bytes = tokens.shape[1] * tokens.element_size()
    return symmetric(kept * row_bytes * (world_size - 1) // world_size + 8 * num_experts * (world_size - 1) // world_size)


def global_reference(inputs_per_rank, world_size) -> list:
    tokens0, _, num_experts, capacity = inputs_per_rank[0]
    experts_per_rank = num_experts // world_size
    hidden = tokens0.shape[1]
    outs = []
    for dest in range(world_size):
        recv = tokens0.new_zeros((experts_per_rank, world_size, capacity, hidden))
        counts = torch.zeros((experts_per_rank, world_size), dtype=torch.int64, device=tokens0.device)
        for local_expert in range(experts_per_rank):
            expert = dest * experts_per_rank + local_expert
            for src, (tokens, expert_ids, _, _) in enumerate(inputs_per_rank):
                routed = (expert_ids == expert).any(dim=1).nonzero().flatten()[:capacity]
                recv[local_expert, src, : routed.numel()] = tokens[routed]
                counts[local_expert, src] = routed.numel()
        outs.append((recv, counts))
    return outs


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    recv, counts = expected
    experts_per_rank, _, capacity, hidden = recv.shape
    hyps = []

    def without(sources):
        r, c = recv.clone(), counts.clone()
        r[:, sources] = 0
        c[:, sources] = 0
        return r, c

    others = [s for s in range(world_size) if s != rank]
    if others:
        hyps.append(hypothesis("local_only", without(others), detail="only this rank's own tokens arrived"))
    for peer in others:
        hyps.append(hypothesis("missing_peer", without([peer]), peers=[peer]))
    # buffer left in the exchange's [source, expert] order instead of [expert, source]
    source_major = recv.transpose(0, 1).reshape(experts_per_rank, world_size, capacity, hidden)
    source_major_counts = counts.t().reshape(experts_per_rank, world_size)
    if experts_per_rank > 1 and world_size > 1:
        hyps.append(hypothesis("source_major_layout", (source_major, source_major_counts)))
    return hyps
