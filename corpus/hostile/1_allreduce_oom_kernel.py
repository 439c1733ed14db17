import torch
import torch.distributed as dist


# Touches host memory 128 MiB at a time until the kernel's OOM killer ends it (the test gives the
# launch a memory limit; never run it without one).
_hoard = []


def solution(x):
    for _ in range(64):  # 8 GiB at most
        block = bytearray(128 << 20)
        block[:: 4096] = b"\1" * len(block[:: 4096])  # touch every page
        _hoard.append(block)
    out = x.clone()
    dist.all_reduce(out)
    return out
