import torch
import torch.distributed as dist


while True:
    pass


def solution(x):
    return x
