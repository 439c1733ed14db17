import torch
import torch.distributed as dist


# In place: the sum lands in the input itself, which is returned (output aliases the input).
@torch.no_grad()
def solution(x):
    dist.all_reduce(x)
    return x
