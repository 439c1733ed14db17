import torch
import torch.distributed as dist


# Asks for a petabyte on the input device.
def solution(x):
    return torch.empty(1 << 50, dtype=torch.uint8, device=x.device)
