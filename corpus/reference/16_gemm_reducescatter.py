"""Reference for problem 16: partial matmul then reduce-scatter along rows.

A_local: [M, K // world], B_local: [K // world, N], M divisible by world.
Returns rows [rank * M/world, (rank+1) * M/world) of sum over ranks of A_local @ B_local.
"""
import torch
import torch.distributed as dist


def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    partial = (A_local @ B_local).contiguous()
    out = torch.empty((partial.shape[0] // world, partial.shape[1]),
                      dtype=partial.dtype, device=partial.device)
    dist.reduce_scatter_tensor(out, partial)
    return out
