"""Reference for problem 54: ring (context-parallel) attention, non-causal.

q, k, v: [B, H, S_local, D], this rank's sequence shard. Returns attention of the local queries
over the keys and values of every rank, [B, H, S_local, D].
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    ks = [torch.empty_like(k) for _ in range(world)]
    vs = [torch.empty_like(v) for _ in range(world)]
    dist.all_gather(ks, k.contiguous())
    dist.all_gather(vs, v.contiguous())
    return F.scaled_dot_product_attention(q, torch.cat(ks, dim=2), torch.cat(vs, dim=2))
