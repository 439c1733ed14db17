import torch
import torch.distributed as dist


# Rank 0 waits in a barrier that rank 1 never reaches.
import threading


def solution(x):
    if dist.get_rank() == 1:
        threading.Event().wait()
    dist.barrier()
    return x.clone()
