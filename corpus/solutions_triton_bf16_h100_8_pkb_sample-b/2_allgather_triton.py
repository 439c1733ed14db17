"""
All-gather in Triton: every program copies one block of one peer's shard.

Grid = (blocks per shard, world). Program (b, r) loads block b of rank r's symmetric buffer and
stores it into out[r]. A single launch gathers everything; the input is staged into the
symmetric buffer just before the launch.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import triton
import triton.language as tl


@triton.jit
def _gather_kernel(ptrs_ptr, out_ptr, shard_numel, BLOCK: tl.constexpr):
    # ptrs_ptr: int64 device tensor with every rank's symmetric buffer address
    # out_ptr:  [world, shard_numel] local output
    # program (b, r) copies elements [b*BLOCK, (b+1)*BLOCK) of rank r's shard
    b = tl.program_id(0)
    r = tl.program_id(1)
    src = tl.load(ptrs_ptr + r).to(tl.pointer_type(tl.bfloat16))
    offs = b * BLOCK + tl.arange(0, BLOCK)
    mask = offs < shard_numel
    vals = tl.load(src + offs, mask=mask)
    tl.store(out_ptr + r * shard_numel + offs, vals, mask=mask)


_state = {}


def _get_state(tensor):
    """Symmetric buffer, handle and the device tensor of peer addresses, built once per size."""
    n = tensor.numel()
    if n not in _state:
        buf = symm_mem.empty(n, device=tensor.device, dtype=torch.bfloat16)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        ptrs = torch.tensor(hdl.buffer_ptrs, dtype=torch.int64, device=tensor.device)
        _state[n] = (buf, hdl, ptrs)
    return _state[n]


def _block_for(n):
    # one program per 4096 elements, but never fewer than 8 programs per rank
    block = 4096
    while block > 256 and triton.cdiv(n, block) < 8:
        block //= 2
    return block


def solution(tensor):
    """Return [world, *tensor.shape]: every rank's tensor, stacked in rank order."""
    n = tensor.numel()
    buf, hdl, ptrs = _get_state(tensor)
    world = hdl.world_size
    buf.copy_(tensor.reshape(-1).to(torch.bfloat16))
    out = torch.empty((world, n), device=tensor.device, dtype=torch.bfloat16)
    BLOCK = _block_for(n)
    _gather_kernel[(triton.cdiv(n, BLOCK), world)](ptrs, out, n, BLOCK=BLOCK)
    return out.view((world,) + tuple(tensor.shape)).to(tensor.dtype)
