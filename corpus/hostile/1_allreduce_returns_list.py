import torch
import torch.distributed as dist


# Returns the right tensor inside a list.
@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return [out]
