"""
NVLS all-reduce (bf16) using multimem instructions on the symmetric buffer's multicast address.

Each 16-byte vector (8 bf16) is reduced in the NVSwitch with fp32 accumulation by
multimem.ld_reduce and broadcast back with multimem.st. Work is split evenly across ranks so each
rank reduces 1/world of the vectors; grid-stride loop, 128-bit accesses only.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void multimem_allreduce_bf16(uint4* mc, int64_t n_vec, int rank, int world) {
    int64_t per_rank = n_vec / world;
    int64_t start = (int64_t)rank * per_rank;
    int64_t end = (rank == world - 1) ? n_vec : start + per_rank;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(mc + i) : "memory");
        asm volatile("multimem.st.relaxed.sys.global.v4.bf16x2 [%0], {%1, %2, %3, %4};"
                     :: "l"(mc + i), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    }
}

void allreduce_mc(int64_t mc_ptr, int64_t numel, int64_t rank, int64_t world) {
    int64_t n_vec = numel / 8;
    int threads = 1024;
    int blocks = 64;
    multimem_allreduce_bf16<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<uint4*>(mc_ptr), n_vec, (int)rank, (int)world);
}
"""

_ext = None
_buffers = {}


def _load():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="nvls_bf16_allreduce",
            cpp_sources="void allreduce_mc(int64_t mc_ptr, int64_t numel, int64_t rank, int64_t world);",
            cuda_sources=cuda_src,
            functions=["allreduce_mc"],
            with_cuda=True,
            extra_cuda_cflags=["-O3", "-arch=sm_90a"],
        )
    return _ext


def _symm_buffer(numel, device):
    if numel not in _buffers:
        buf = symm_mem.empty(numel, device=device, dtype=torch.bfloat16)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _buffers[numel] = (buf, hdl)
    return _buffers[numel]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """In-switch sum all-reduce of a bf16 tensor."""
    ext = _load()
    numel = tensor.numel()
    buf, hdl = _symm_buffer(numel, tensor.device)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    ext.allreduce_mc(hdl.multicast_ptr, numel, hdl.rank, hdl.world_size)
    hdl.barrier(channel=0)
    return buf.clone().view_as(tensor)
