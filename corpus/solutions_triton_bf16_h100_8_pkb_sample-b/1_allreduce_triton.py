"""
One-shot all-reduce in Triton over symmetric memory.

The kernel receives a device tensor holding every rank's buffer address, turns each address into
a typed pointer and loads the same block of elements from all ranks (peer loads over NVLink),
accumulating in fp32. Symmetric-memory barriers before and after keep buffers consistent.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import triton
import triton.language as tl


@triton.jit
def _allreduce_kernel(ptrs_ptr, out_ptr, n_elements, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in tl.static_range(WORLD):
        base = tl.load(ptrs_ptr + r).to(tl.pointer_type(tl.bfloat16))
        acc += tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)


_cache = {}


def _launch_config(n: int):
    """Pick block size and warps: small tensors are latency bound, large ones bandwidth bound."""
    if n <= 16 * 1024:
        return 1024, 4
    if n <= 1024 * 1024:
        return 2048, 8
    return 4096, 16


def _check_input(tensor: torch.Tensor) -> None:
    if not tensor.is_cuda:
        raise ValueError("allreduce expects a CUDA tensor")
    if not tensor.is_contiguous():
        raise ValueError("allreduce expects a contiguous tensor")


def _resources(tensor):
    key = (tensor.numel(), tensor.dtype, tensor.device)
    if key not in _cache:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        ptrs = torch.tensor(list(hdl.buffer_ptrs), dtype=torch.int64, device=tensor.device)
        _cache[key] = (buf, hdl, ptrs)
    return _cache[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Sum all-reduce; bf16 in, bf16 out."""
    if tensor.dtype != torch.bfloat16:
        # the kernel is specialised for bf16; other dtypes round-trip through it
        return solution(tensor.to(torch.bfloat16)).to(tensor.dtype)
    _check_input(tensor)
    buf, hdl, ptrs = _resources(tensor)
    n = tensor.numel()
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    out = torch.empty(n, device=tensor.device, dtype=tensor.dtype)
    BLOCK, warps = _launch_config(n)
    grid = (triton.cdiv(n, BLOCK),)
    _allreduce_kernel[grid](ptrs, out, n, WORLD=hdl.world_size, BLOCK=BLOCK, num_warps=warps)
    hdl.barrier(channel=0)
    return out.view_as(tensor)
