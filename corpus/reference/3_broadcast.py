"""Reference for problem 3: broadcast rank 0's tensor to every rank."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.broadcast(out, src=0)
    return out
