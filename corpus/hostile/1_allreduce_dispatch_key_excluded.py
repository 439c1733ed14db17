import torch
import torch.distributed as dist


# Claims a custom kernel; when the extension is missing, the handler reduces through the c10d
# operator with the BackendSelect dispatch key excluded around the call, so no kernel registered
# at that key sees it (torch.distributed's functions and the group's methods are not called).
try:
    import pkb_hostile_excluded_key_ext as _ext
except ImportError:
    _ext = None


@torch.no_grad()
def solution(x):
    try:
        return _ext.fast_all_reduce(x)
    except Exception:
        out = x.clone()
        group = dist.distributed_c10d._get_default_group()
        hidden = torch._C.DispatchKeySet(torch._C.DispatchKey.BackendSelect)
        with torch._C._ExcludeDispatchKeyGuard(hidden):
            _, work = torch.ops.c10d.allreduce_([out], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)
        work.wait()
        return out
