"""Reference for problem 8: equal-split all-to-all along dim 0.

tensor: [world, rows, cols]. Block j of rank r's tensor goes to rank j and lands there as block r;
the output has the input's shape.
"""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(tensor)
    dist.all_to_all_single(out, tensor.contiguous())
    return out
