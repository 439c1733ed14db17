import torch
import torch.distributed as dist


import time


def solution(x):
    time.sleep(3600)
    return x
