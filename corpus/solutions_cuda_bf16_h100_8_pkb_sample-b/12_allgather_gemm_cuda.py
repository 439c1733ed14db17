"""
All-gather + GEMM, the peer pulls on a side stream that never waits for the current stream.

out = cat_r(A_r, dim=1) @ B = sum_r A_r @ B[r*Kl:(r+1)*Kl].

Each rank publishes its shard in symmetric memory and barriers; a cached side stream then copies
every peer's shard out by DMA while the current stream computes the local partial product. The
side stream is created non-blocking and is never told to wait: its copies can start before this
rank's barrier has run, i.e. before a peer has published this call's shard, and read the previous
call's data. The closing barrier and the event join are right.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_state = {}


def _resources(A_local):
    key = (tuple(A_local.shape), A_local.dtype, A_local.device)
    if key not in _state:
        buf = symm_mem.empty(A_local.shape, device=A_local.device, dtype=A_local.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        peers = [hdl.get_buffer(r, tuple(A_local.shape), A_local.dtype) for r in range(hdl.world_size)]
        gathered = torch.empty((hdl.world_size,) + tuple(A_local.shape), device=A_local.device, dtype=A_local.dtype)
        _state[key] = (buf, hdl, peers, gathered, torch.cuda.Stream(device=A_local.device), torch.cuda.Event())
    return _state[key]


def solution(A_local: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    buf, hdl, peers, gathered, pull_stream, pulled = _resources(A_local)
    world, rank, kl = hdl.world_size, hdl.rank, A_local.shape[1]

    buf.copy_(A_local)
    hdl.barrier(channel=0)

    with torch.cuda.stream(pull_stream):
        for i in range(1, world):
            p = (rank + i) % world
            gathered[p].copy_(peers[p], non_blocking=True)
        pulled.record(pull_stream)

    acc = torch.matmul(A_local, B[rank * kl:(rank + 1) * kl]).float()
    torch.cuda.current_stream().wait_event(pulled)
    for i in range(1, world):
        p = (rank + i) % world
        acc += torch.matmul(gathered[p], B[p * kl:(p + 1) * kl])
    hdl.barrier(channel=1)
    return acc.to(A_local.dtype)
