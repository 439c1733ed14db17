"""
All-reduce through NVLink SHARP: every rank reduces its slice through the multicast address and
stores the sum back through it, so every rank's buffer holds the full result.

It never checks that the machine gave a multicast object: on one without, multicast_ptr is 0.
(No run tree: where it runs, and whether multicast exists there, is not known.)
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// 8 bf16 (16 bytes) per thread; this rank owns slots [rank * per_rank, (rank + 1) * per_rank).
__global__ void mc_allreduce_kernel(uint64_t mc_base, int64_t per_rank, int64_t rank) {
    int64_t slot = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= per_rank) return;
    uint64_t addr = mc_base + (uint64_t)(rank * per_rank + slot) * 16;
    uint32_t a, b, c, d;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(addr) : "memory");
    asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

void mc_allreduce(int64_t mc_base, int64_t per_rank, int64_t rank) {
    const int threads = 256;
    const int blocks = (int)((per_rank + threads - 1) / threads);
    mc_allreduce_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        (uint64_t)mc_base, per_rank, rank);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
CPP_SRC = "void mc_allreduce(int64_t mc_base, int64_t per_rank, int64_t rank);"

_state = {}


def _setup(tensor):
    key = (tensor.numel(), tensor.dtype)
    if key not in _state:
        ext = load_inline(name="mc_ar", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["mc_allreduce"])
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _state[key] = (ext, buf, hdl)
    return _state[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    ext, buf, hdl = _setup(tensor)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    per_rank = tensor.numel() // 8 // hdl.world_size
    ext.mc_allreduce(hdl.multicast_ptr, per_rank, hdl.rank)
    hdl.barrier(channel=0)
    return buf.view_as(tensor).clone()
