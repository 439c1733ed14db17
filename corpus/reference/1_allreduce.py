"""Reference for problem 1: sum all-reduce of one tensor across the world."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.all_reduce(out)
    return out
