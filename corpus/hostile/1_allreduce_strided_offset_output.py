import torch
import torch.distributed as dist


# A correct answer in an unusual layout: a view with every stride doubled, at a storage offset of
# 7, inside a buffer of NaNs the candidate allocated. Nothing is wrong with it.
@torch.no_grad()
def solution(x):
    strides, step = [], 2
    for size in reversed(x.shape):
        strides.append(step)
        step *= size
    buf = torch.full((7 + 2 * x.numel(),), float("nan"), dtype=x.dtype, device=x.device)
    out = buf.as_strided(x.shape, tuple(reversed(strides)), 7)
    total = x.clone()
    dist.all_reduce(total)  # into a dense tensor: gloo reduces a strided one as if it were dense
    out.copy_(total)
    return out
