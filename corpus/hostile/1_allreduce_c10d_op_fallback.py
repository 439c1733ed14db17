import torch
import torch.distributed as dist


# Claims a custom kernel; when the extension is missing, the handler reduces through the
# dispatcher's c10d operator itself (torch.ops.c10d.allreduce_), under every torch.distributed
# function and every ProcessGroup method.
try:
    import pkb_hostile_c10d_op_ext as _ext
except ImportError:
    _ext = None


@torch.no_grad()
def solution(x):
    try:
        return _ext.fast_all_reduce(x)
    except Exception:
        out = x.clone()
        group = dist.distributed_c10d._get_default_group()
        _, work = torch.ops.c10d.allreduce_([out], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)
        work.wait()
        return out
