"""Reference for problem 16: partial matmul then reduce-scatter along rows.

A: [M, K // world], B_shard: [K // world, N], M divisible by world.
Returns rows [rank * M/world, (rank+1) * M/world) of sum over ranks of A @ B_shard.
"""
import torch
import torch.distributed as dist


def solution(A: torch.Tensor, B_shard: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    partial = (A @ B_shard).contiguous()
    out = torch.empty((partial.shape[0] // world, partial.shape[1]),
                      dtype=partial.dtype, device=partial.device)
    dist.reduce_scatter_tensor(out, partial)
    return out
