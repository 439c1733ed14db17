"""
Push-style all-to-all: each block writes its slice of chunk j straight into rank j's symmetric
receive buffer, fences at system scope, then raises a per-(source, block) flag in rank j's signal
pad with the call's epoch. The receiving block spins on the flags of its slice, fences again, and
the rank copies the receive buffer out. A closing barrier keeps the receive buffer from being
overwritten by a fast peer's next call while we still copy out of it.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#define FLAG_BASE 128      // keep clear of the slots hdl.barrier() uses
#define NBLOCKS 16

__global__ void a2a_push_kernel(const int4* __restrict__ src, const uint64_t* __restrict__ recv_ptrs,
                                const uint64_t* __restrict__ pad_ptrs, int64_t chunk_vec,
                                int rank, int world, uint32_t epoch) {
    // every block handles the same slice [lo, hi) of every destination chunk
    int64_t per_block = (chunk_vec + gridDim.x - 1) / gridDim.x;
    int64_t lo = blockIdx.x * per_block;
    int64_t hi = min(chunk_vec, lo + per_block);
    for (int d = 0; d < world; ++d) {
        int dst_rank = (rank + d) % world;
        int4* dst = reinterpret_cast<int4*>(recv_ptrs[dst_rank]) + (int64_t)rank * chunk_vec;
        const int4* s = src + (int64_t)dst_rank * chunk_vec;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = s[i];
    }
    __threadfence_system();              // our stores are visible system-wide before the flags
    __syncthreads();
    if (threadIdx.x < world) {
        volatile uint32_t* peer_pad = reinterpret_cast<volatile uint32_t*>(pad_ptrs[threadIdx.x]);
        peer_pad[FLAG_BASE + rank * NBLOCKS + blockIdx.x] = epoch;
        volatile uint32_t* my_pad = reinterpret_cast<volatile uint32_t*>(pad_ptrs[rank]);
        while (my_pad[FLAG_BASE + threadIdx.x * NBLOCKS + blockIdx.x] != epoch) { }
        __threadfence_system();
    }
    __syncthreads();
}

void a2a_push(torch::Tensor src, int64_t recv_ptrs, int64_t pad_ptrs, int64_t rank, int64_t world,
              int64_t epoch) {
    int64_t bytes = src.numel() * src.element_size();
    TORCH_CHECK(bytes % (16 * world) == 0, "each chunk must be a multiple of 16 bytes");
    a2a_push_kernel<<<NBLOCKS, 512, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const int4*>(src.data_ptr()), reinterpret_cast<const uint64_t*>(recv_ptrs),
        reinterpret_cast<const uint64_t*>(pad_ptrs), bytes / 16 / world, (int)rank, (int)world,
        (uint32_t)epoch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = None
_state = {}


def _init(tensor):
    global _ext
    if _ext is None:
        _ext = load_inline(name="pkb_a2a_push_fence",
                           cpp_sources="void a2a_push(torch::Tensor src, int64_t recv_ptrs, int64_t pad_ptrs, "
                                       "int64_t rank, int64_t world, int64_t epoch);",
                           cuda_sources=CUDA_SRC, functions=["a2a_push"], with_cuda=True,
                           extra_cuda_cflags=["-O3"])
    key = (tensor.numel(), tensor.dtype)
    if key not in _state:
        recv = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(recv, dist.group.WORLD)
        _state[key] = {"recv": recv, "hdl": hdl, "epoch": 0}
    return _state[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Equal-split all-to-all along dim 0."""
    st = _init(tensor)
    hdl = st["hdl"]
    st["epoch"] += 1                     # new value every call: flags never need resetting
    _ext.a2a_push(tensor.contiguous(), hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev,
                  hdl.rank, hdl.world_size, st["epoch"])
    out = st["recv"].view(tensor.shape).clone()
    hdl.barrier(channel=0)               # peers may push into `recv` again only after this
    return out
