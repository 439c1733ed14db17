import torch
import torch.distributed as dist


# Scales its input in place before reducing: the answer is wrong.
@torch.no_grad()
def solution(x):
    x.mul_(3.0)
    out = x.clone()
    dist.all_reduce(out)
    return out
