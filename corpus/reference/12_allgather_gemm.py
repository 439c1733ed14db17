"""Reference for problem 12: all-gather A along dim 1, then matmul.

A_local: [M, K // world] (this rank's column shard of A); B: [K, N] replicated.
Returns cat(A_0, ..., A_{w-1}, dim=1) @ B, shape [M, N].
"""
import torch
import torch.distributed as dist


def solution(A_local: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    parts = [torch.empty_like(A_local) for _ in range(world)]
    dist.all_gather(parts, A_local.contiguous())
    return torch.cat(parts, dim=1) @ B
