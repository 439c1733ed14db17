import torch
import torch.distributed as dist


# Right answer, but the input is zeroed afterwards (the problem is out of place).
@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    x.zero_()
    return out
