"""Reference for problem 7: sum reduce-scatter along dim 0 (tensor.shape[0] divisible by world)."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    out = torch.empty((tensor.shape[0] // world,) + tuple(tensor.shape[1:]),
                      dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(out, tensor.contiguous())
    return out
