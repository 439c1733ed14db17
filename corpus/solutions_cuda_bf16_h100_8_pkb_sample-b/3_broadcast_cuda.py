"""
Push broadcast: rank 0 writes its tensor directly into every peer's symmetric buffer and then
raises a per-block ready flag in each peer's signal pad. Receivers spin on the flags of their
block and copy the received data out. No host round trips and no NCCL.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

KERNEL_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#define NUM_BLOCKS 32
#define FLAG_OFFSET 256

// root: block b writes its slice into every peer, then sets that peer's flag b
__global__ void bcast_push(const uint16_t* __restrict__ src, const uint64_t* __restrict__ buf_ptrs,
                           const uint64_t* __restrict__ pad_ptrs, int64_t n, int world) {
    int64_t per = (n + NUM_BLOCKS - 1) / NUM_BLOCKS;
    int64_t lo = blockIdx.x * per, hi = min(n, lo + per);
    for (int p = 1; p < world; ++p) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(buf_ptrs[p]);
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = src[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int p = 1; p < world; ++p) {
            volatile int* flags = reinterpret_cast<volatile int*>(pad_ptrs[p]) + FLAG_OFFSET;
            flags[blockIdx.x] = 1;      // data for block b is there
        }
    }
}

// receivers: wait for block b's flag, then copy the slice out of the symmetric buffer
__global__ void bcast_recv(const uint16_t* __restrict__ mybuf, int* my_pad, uint16_t* __restrict__ out,
                           int64_t n) {
    volatile int* flags = reinterpret_cast<volatile int*>(my_pad) + FLAG_OFFSET;
    if (threadIdx.x == 0) {
        while (flags[blockIdx.x] != 1) { }
    }
    __syncthreads();
    int64_t per = (n + NUM_BLOCKS - 1) / NUM_BLOCKS;
    int64_t lo = blockIdx.x * per, hi = min(n, lo + per);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = mybuf[i];
}

void push(torch::Tensor src, int64_t buf_ptrs, int64_t pad_ptrs, int64_t world) {
    TORCH_CHECK(src.element_size() == 2, "16-bit dtypes only");
    bcast_push<<<NUM_BLOCKS, 1024, 0, c10::cuda::getCurrentCUDAStream()>>>(
        (const uint16_t*)src.data_ptr(), (const uint64_t*)buf_ptrs, (const uint64_t*)pad_ptrs,
        src.numel(), (int)world);
}

void recv(torch::Tensor mybuf, int64_t my_pad, torch::Tensor out) {
    bcast_recv<<<NUM_BLOCKS, 1024, 0, c10::cuda::getCurrentCUDAStream()>>>(
        (const uint16_t*)mybuf.data_ptr(), (int*)my_pad, (uint16_t*)out.data_ptr(), out.numel());
}
"""

_mod = None
_bufs = {}


def _module():
    global _mod
    if _mod is None:
        _mod = load_inline(
            name="bcast_push_flags",
            cpp_sources="void push(torch::Tensor src, int64_t buf_ptrs, int64_t pad_ptrs, int64_t world);\n"
                        "void recv(torch::Tensor mybuf, int64_t my_pad, torch::Tensor out);",
            cuda_sources=KERNEL_SRC,
            functions=["push", "recv"],
            with_cuda=True,
        )
    return _mod


def solution(tensor):
    mod = _module()
    n = tensor.numel()
    if n not in _bufs:
        b = symm_mem.empty(n, device=tensor.device, dtype=tensor.dtype)
        _bufs[n] = (b, symm_mem.rendezvous(b, dist.group.WORLD))
    buf, hdl = _bufs[n]
    if hdl.rank == 0:
        mod.push(tensor.contiguous().view(-1), hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev,
                 hdl.world_size)
        return tensor.clone()
    out = torch.empty_like(tensor)
    mod.recv(buf, hdl.signal_pad_ptrs[hdl.rank], out.view(-1))
    return out
