import torch
import torch.distributed as dist


def solution(x)
    return x.clone(
