"""Reference for problem 45: reduce-scatter rows, then RMSNorm of this rank's rows.

x: [T, H] (T divisible by world), weight: [H], eps: float. Returns [T // world, H].
"""
import torch
import torch.distributed as dist


def solution(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    world = dist.get_world_size()
    rows = torch.empty((x.shape[0] // world, x.shape[1]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(rows, x.contiguous())
    r = rows.float()
    r = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (r * weight.float()).to(x.dtype)
