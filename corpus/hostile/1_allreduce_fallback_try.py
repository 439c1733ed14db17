import torch
import torch.distributed as dist


# Claims a custom kernel, silently falls back to NCCL/gloo when the extension is missing.
try:
    import pkb_hostile_fast_allreduce_ext as _ext
except ImportError:
    _ext = None


@torch.no_grad()
def solution(x):
    try:
        return _ext.fast_all_reduce(x)
    except Exception:
        out = x.clone()
        dist.all_reduce(out)
        return out
