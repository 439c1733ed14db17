"""
All-gather + GEMM with communication on a side stream.

out = cat_r(A_r, dim=1) @ B = sum_r A_r @ B[r*Kl:(r+1)*Kl].

The local term A_local @ B_rank needs no communication, so the main stream starts on it right
away while a side stream pulls every peer's A shard out of symmetric memory (copy-engine DMA
from `hdl.get_buffer(peer, ...)`). One event hands the gathered shards to the main stream, which
then adds the remaining partial products. Partials are summed in fp32.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_cache = {}


class _Ctx:
    """Everything that must not be rebuilt on the timed path."""

    def __init__(self, A_local: torch.Tensor):
        self.shape = tuple(A_local.shape)
        self.dtype = A_local.dtype
        self.buf = symm_mem.empty(self.shape, device=A_local.device, dtype=self.dtype)
        self.hdl = symm_mem.rendezvous(self.buf, dist.group.WORLD)
        self.world = self.hdl.world_size
        self.rank = self.hdl.rank
        self.peer_views = [self.hdl.get_buffer(r, self.shape, self.dtype) for r in range(self.world)]
        self.gathered = torch.empty((self.world,) + self.shape, device=A_local.device, dtype=self.dtype)
        self.comm_stream = torch.cuda.Stream(device=A_local.device)
        self.copied = torch.cuda.Event()


def _ctx(A_local):
    key = (tuple(A_local.shape), A_local.dtype, A_local.device)
    if key not in _cache:
        _cache[key] = _Ctx(A_local)
    return _cache[key]


def solution(A_local: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """cat(all ranks' A_local, dim=1) @ B, overlapping the gather with the local partial GEMM."""
    assert A_local.dim() == 2 and B.dim() == 2, "expected 2-D operands"
    ctx = _ctx(A_local)
    kl = ctx.shape[1]
    assert B.shape[0] == kl * ctx.world, "B must have K = world * K_local rows"

    main = torch.cuda.current_stream()
    ctx.buf.copy_(A_local)
    ctx.hdl.barrier(channel=0)                 # every rank has published its shard

    ctx.comm_stream.wait_stream(main)          # side stream starts after the barrier
    with torch.cuda.stream(ctx.comm_stream):
        for i in range(1, ctx.world):
            p = (ctx.rank + i) % ctx.world
            ctx.gathered[p].copy_(ctx.peer_views[p], non_blocking=True)   # NVLink DMA
        ctx.copied.record(ctx.comm_stream)

    # runs concurrently with the copies above
    acc = torch.matmul(A_local, B[ctx.rank * kl:(ctx.rank + 1) * kl]).float()

    main.wait_event(ctx.copied)
    for i in range(1, ctx.world):
        p = (ctx.rank + i) % ctx.world
        acc += torch.matmul(ctx.gathered[p], B[p * kl:(p + 1) * kl])
    ctx.hdl.barrier(channel=0)                 # nobody overwrites a shard that is still being read
    return acc.to(A_local.dtype)
