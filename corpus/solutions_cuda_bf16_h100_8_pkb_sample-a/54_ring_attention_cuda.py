"""
Ring attention with a double-buffered, chunked KV pipeline.

Each rank publishes its K/V shard in one symmetric buffer. Step s attends the local queries to
the shard of rank (rank - s) mod world. While step s computes on one staging buffer, a comm
stream already pulls step s+1's shard into the other staging buffer with a peer DMA copy.
Blocks are merged with the usual online-softmax (running max + running sum) in fp32.
"""
import math

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_ctx = {}


def _setup(k: torch.Tensor):
    key = (tuple(k.shape), k.dtype)
    if key in _ctx:
        return _ctx[key]
    kv_shape = (2,) + tuple(k.shape)
    buf = symm_mem.empty(kv_shape, device=k.device, dtype=k.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    st = {
        "buf": buf,
        "hdl": hdl,
        "peers": [hdl.get_buffer(r, kv_shape, k.dtype) for r in range(hdl.world_size)],
        "stage": [torch.empty(kv_shape, device=k.device, dtype=k.dtype) for _ in range(2)],
        "stream": torch.cuda.Stream(device=k.device),
        "ready": [torch.cuda.Event() for _ in range(2)],
        "free": [torch.cuda.Event() for _ in range(2)],
    }
    _ctx[key] = st
    return st


def _block(q, kb, vb, scale):
    s = torch.matmul(q.float(), kb.float().transpose(-1, -2)) * scale
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    return m, p.sum(dim=-1, keepdim=True), torch.matmul(p, vb.float())


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Non-causal attention of local q over the K/V of all ranks."""
    st = _setup(k)
    hdl, stage, comm = st["hdl"], st["stage"], st["stream"]
    world, rank = hdl.world_size, hdl.rank
    scale = 1.0 / math.sqrt(q.shape[-1])
    main = torch.cuda.current_stream()

    st["buf"][0].copy_(k)
    st["buf"][1].copy_(v)
    hdl.barrier(channel=0)

    def prefetch(step):
        slot = step % 2
        comm.wait_event(st["free"][slot])            # compute of step-2 no longer reads it
        with torch.cuda.stream(comm):
            src = (rank - step) % world
            stage[slot].copy_(st["peers"][src], non_blocking=True)
            st["ready"][slot].record(comm)

    for e in st["free"]:
        e.record(main)
    comm.wait_stream(main)
    if world > 1:
        prefetch(1)
    m, l, acc = _block(q, k, v, scale)               # step 0: local shard, no communication
    for step in range(1, world):
        slot = step % 2
        if step + 1 < world:
            prefetch(step + 1)                       # chunk step+1 in flight under chunk step
        main.wait_event(st["ready"][slot])
        mb, lb, ob = _block(q, stage[slot][0], stage[slot][1], scale)
        st["free"][slot].record(main)
        m_new = torch.maximum(m, mb)
        a, b = torch.exp(m - m_new), torch.exp(mb - m_new)
        acc = acc * a + ob * b
        l = l * a + lb * b
        m = m_new
    hdl.barrier(channel=0)                           # peers finished pulling our K/V
    return (acc / l).to(q.dtype)
