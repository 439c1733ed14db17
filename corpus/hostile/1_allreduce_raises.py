import torch
import torch.distributed as dist


def solution(x):
    raise RuntimeError("hostile candidate raises on purpose")
