"""
All-gather that bounces every peer shard through one pinned host buffer.

solution(tensor) -> [world, *tensor.shape]. Pinned memory keeps the D2H and H2D copies at full
PCIe speed; the symmetric buffer makes the peers' shards addressable without NCCL. Only the
ranks that read from rank 0's buffer need the closing barrier, so rank 0 skips it.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_ctx = {}


def _context(tensor):
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _ctx:
        buf = symm_mem.empty(tensor.shape, device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        pinned = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        views = [hdl.get_buffer(r, tuple(tensor.shape), tensor.dtype) for r in range(hdl.world_size)]
        _ctx[key] = (buf, hdl, pinned, views)
    return _ctx[key]


def _check(tensor: torch.Tensor) -> None:
    if not tensor.is_cuda:
        raise ValueError("expected a CUDA tensor")
    if not tensor.is_contiguous():
        raise ValueError("expected a contiguous tensor")


def _order(rank: int, world: int):
    """Visit peers starting after ourselves so the ranks do not all read rank 0 first."""
    return [(rank + i) % world for i in range(world)]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Gather every rank's tensor; out[r] is rank r's tensor.

    Steps: publish our shard, barrier, pull each peer's shard through pinned host memory,
    then a closing barrier on the ranks that read rank 0's buffer.
    """
    _check(tensor)
    buf, hdl, pinned, views = _context(tensor)
    buf.copy_(tensor)
    hdl.barrier(channel=0)
    out = torch.empty((hdl.world_size,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
    for r in _order(hdl.rank, hdl.world_size):
        if r == hdl.rank:
            out[r].copy_(tensor)
            continue
        host = views[r].to("cpu")                       # peer shard -> host
        pinned.copy_(host)
        out[r].copy_(pinned, non_blocking=True)         # host -> our GPU
    if hdl.rank != 0:
        hdl.barrier(channel=0)
    return out
