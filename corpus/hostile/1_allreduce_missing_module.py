import torch
import torch.distributed as dist


import pkb_hostile_module_that_does_not_exist


def solution(x):
    return x
