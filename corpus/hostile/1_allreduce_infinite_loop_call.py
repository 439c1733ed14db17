import torch
import torch.distributed as dist


def solution(x):
    while True:
        pass
