import torch
import torch.distributed as dist


# Does the work and forgets to return it.
@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
