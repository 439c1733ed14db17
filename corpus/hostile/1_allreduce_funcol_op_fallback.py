import torch
import torch.distributed as dist


# Claims a custom kernel; when the extension is missing, the handler reduces through the
# functional collective's operator (torch.ops._c10d_functional.all_reduce), not through
# torch.distributed._functional_collectives' Python function.
try:
    import pkb_hostile_funcol_op_ext as _ext
except ImportError:
    _ext = None


@torch.no_grad()
def solution(x):
    try:
        return _ext.fast_all_reduce(x)
    except Exception:
        group_name = dist.distributed_c10d._get_default_group().group_name
        out = torch.ops._c10d_functional.all_reduce(x, "sum", group_name)
        return torch.ops._c10d_functional.wait_tensor(out)
