"""MoE combine after the experts: reorder expert outputs by source rank, all-to-all them back, and
sum each token's expert outputs weighted by its routing weights (PKB's signature and contract).

Experts: num_experts = world * L; rank r holds local experts 0..L-1. Inputs per rank r:
    expert_outputs [T*K, H]       rows grouped by (local expert l, source rank s), l-major, in blocks
                                  of num_global_tokens_per_local_expert[s][l] rows
    routing_weights [T, K]        this rank's combine weights (softmax per token)
    selected_experts [T, K] int64 this rank's routing, ascending expert ids per token
    num_experts int
    input_splits [world]          rows received from each rank (sum T*K)
    output_splits [world]         rows sent to each rank (sum T*K); input_splits[r][s] on rank r
                                  equals output_splits[s][r] on rank s
    num_global_tokens_per_local_expert [world, L] int64
    routing_map [E, T] bool       token t routed to expert e
    local_input_permutation_mapping [T*K] int64  token of each routed row, in (expert, token) order
    org_hidden_states_shape torch.Size([T, H])
    group                         None: the world
Output on rank r: [T, H] in the dtype of expert_outputs: row i of the received rows (source-rank
order) is the output for the i-th True entry of routing_map in (expert, token) order; it is
scaled by that (token, expert)'s routing weight and summed into the token's row (float32 here).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from problems import ProblemSpec
from problems._common import (
    alltoall_bytes,
    check_scale,
    circulant_splits,
    hypothesis,
    nbytes,
    randn,
    resolve_dtype,
    seeded_generator,
    symmetric,
)

PROBLEM = ProblemSpec(
    id=29,
    name="moe_post_all2all",
    category="moe",
    description="Top-k MoE combine: reorder expert outputs by source rank, all-to-all back, routing-weighted sum per token.",
    source="veScale / Megatron-LM MoE token unpermutation after the expert all-to-all",
    has_compute=True,
    dtypes=("bfloat16", "float32"),
    tolerances={"float32": (1e-5, 1e-5), "bfloat16": (3e-2, 2e-2)},
    notes="Split sizes and per-expert counts are uneven and change with the trial.",
)

SIZES = {"small": {"tokens": 16, "top_k": 2, "hidden": 32}, "large": {"tokens": 4096, "top_k": 2, "hidden": 2048}}


def _ints(sizes) -> list[int]:
    return [int(n) for n in (sizes.tolist() if isinstance(sizes, torch.Tensor) else sizes)]


def _by_source_rank(expert_outputs, counts, world_size):
    """Rows regrouped from (local expert, source rank) order to (source rank, local expert) order."""
    local_experts = counts.shape[1]
    blocks = expert_outputs.split(_ints(counts.t().reshape(-1)), dim=0)  # block l * world + s
    return torch.cat([blocks[l * world_size + s] for s in range(world_size) for l in range(local_experts)], dim=0)


def _combine(rows, routing_weights, selected_experts, routing_map, permutation, shape):
    """Weighted sum of routed rows into their tokens; rows follow routing_map's (expert, token) order."""
    num_experts, tokens = routing_map.shape
    weight = torch.zeros((tokens, num_experts), dtype=torch.float32, device=rows.device)
    weight.scatter_add_(1, selected_experts, routing_weights.float())
    row_weight = weight.t()[routing_map.bool()]
    out = torch.zeros(tuple(shape), dtype=torch.float32, device=rows.device)
    out.index_add_(0, permutation, rows.float() * row_weight[:, None])
    return out.to(rows.dtype)


@torch.no_grad()
def solution(expert_outputs, routing_weights, selected_experts, num_experts, input_splits, output_splits,
             num_global_tokens_per_local_expert, routing_map, local_input_permutation_mapping,
             org_hidden_states_shape, group=None) -> torch.Tensor:
    world_size = dist.get_world_size(group)
    send = _by_source_rank(expert_outputs, num_global_tokens_per_local_expert, world_size)
    if world_size == 1:
        received = send
    else:
        # output_splits: rows this rank sends to each rank; input_splits: rows it receives
        received = send.new_empty((sum(_ints(input_splits)), send.shape[1]))
        dist.all_to_all_single(received, send.contiguous(), output_split_sizes=_ints(input_splits),
                               input_split_sizes=_ints(output_splits), group=group)
    return _combine(received, routing_weights, selected_experts, routing_map, local_input_permutation_mapping,
                    org_hidden_states_shape)


def _num_experts(world_size: int) -> int:
    return 8 if 8 % world_size == 0 else 2 * world_size  # PKB uses 8 experts


def make_inputs(rank, world_size, trial, device, dtype, scale: str = "small") -> tuple:
    size = check_scale(scale, SIZES)
    top_k, hidden = size["top_k"], size["hidden"]
    tokens = -(-size["tokens"] // world_size) * world_size  # routed rows split evenly on average
    num_experts = _num_experts(world_size)
    local_experts = num_experts // world_size
    routed = tokens * top_k
    gen = seeded_generator(PROBLEM.id, rank, trial)
    selected = torch.rand((tokens, num_experts), generator=gen).argsort(dim=1)[:, :top_k].sort(dim=1).values
    routing_map = torch.zeros((num_experts, tokens), dtype=torch.bool)
    routing_map[selected, torch.arange(tokens)[:, None]] = True
    weights = torch.randn((tokens, top_k), generator=gen).softmax(dim=1)
    expert_outputs = randn(gen, (routed, hidden), device, dtype)
    # uneven blocks per (source rank, local expert): cuts of the routed rows at sorted random points
    cuts = torch.randint(0, routed + 1, (world_size * local_experts - 1,), generator=gen).sort().values
    edges = torch.cat([torch.tensor([0]), cuts, torch.tensor([routed])])
    counts = (edges[1:] - edges[:-1]).view(world_size, local_experts)
    splits = circulant_splits(seeded_generator(PROBLEM.id, 0, trial), world_size, routed // world_size)
    output_splits = splits[rank]
    input_splits = [splits[s][rank] for s in range(world_size)]
    permutation = routing_map.nonzero()[:, 1]  # (expert, token) order
    return (
        expert_outputs,
        weights.to(device=device, dtype=resolve_dtype(dtype)),
        selected.to(device),
        num_experts,
        input_splits,
        output_splits,
        counts.to(device),
        routing_map.to(device),
        permutation.to(device),
        torch.Size([tokens, hidden]),
        None,
    )


def traffic_bytes(inputs, world_size) -> dict:
    return symmetric(max(1, alltoall_bytes(nbytes(inputs[0]), world_size)))


def _received(inputs_per_rank, rank, world_size, skip=(), reorder=True):
    """The rows rank `rank` receives, from the senders' inputs; senders in `skip` send zeros."""
    parts = []
    for s, inp in enumerate(inputs_per_rank):
        rows = _by_source_rank(inp[0], inp[6], world_size) if reorder else inp[0]
        block = rows.split(_ints(inp[5]), dim=0)[rank]
        parts.append(torch.zeros_like(block) if s in skip else block)
    return torch.cat(parts, dim=0)


def _combined(inputs_per_rank, rank, rows, weights=None):
    inp = inputs_per_rank[rank]
    return _combine(rows, inp[1] if weights is None else weights, inp[2], inp[7], inp[8], inp[9])


def global_reference(inputs_per_rank, world_size) -> list:
    return [_combined(inputs_per_rank, r, _received(inputs_per_rank, r, world_size)) for r in range(world_size)]


def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]:
    rows = _received(inputs_per_rank, rank, world_size)
    hyps = [hypothesis("unweighted", _combined(inputs_per_rank, rank, rows, torch.ones_like(inputs_per_rank[rank][1])),
                       detail="routing weights not applied")]
    if world_size > 1 and inputs_per_rank[rank][6].shape[1] > 1:  # with one local expert order is moot
        hyps.append(hypothesis("not_reordered", _combined(inputs_per_rank, rank, _received(
            inputs_per_rank, rank, world_size, reorder=False)), detail="sent in (expert, source) order"))
    if world_size > 1:
        for peer in range(world_size):
            if peer != rank and inputs_per_rank[peer][5][rank]:
                hyps.append(hypothesis("missing_peer", _combined(inputs_per_rank, rank, _received(
                    inputs_per_rank, rank, world_size, skip=(peer,))), peers=[peer]))
    return hyps
