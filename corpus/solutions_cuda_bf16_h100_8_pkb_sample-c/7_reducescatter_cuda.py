"""
Reduce-scatter through NVLink SHARP: each rank reduces its own slice of every rank's symmetric
buffer with one multimem load-reduce per 16 bytes, through the multicast address.

A machine without multicast (or a non-bf16 input, or a single rank) takes the NCCL path.
The output buffer is cached with the symmetric buffer and returned as is.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

// 8 bf16 (16 bytes) per thread, summed across ranks by the switch.
__global__ void mc_reduce_scatter_kernel(uint64_t mc_base, __nv_bfloat16* __restrict__ out,
                                         int64_t shard, int64_t rank) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= shard) return;
    uint64_t addr = mc_base + (uint64_t)(rank * shard + i) * sizeof(__nv_bfloat16);
    uint32_t a, b, c, d;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(addr) : "memory");
    *reinterpret_cast<uint4*>(out + i) = make_uint4(a, b, c, d);
}

void mc_reduce_scatter(int64_t mc_base, torch::Tensor out, int64_t shard, int64_t rank) {
    const int threads = 256;
    const int blocks = (int)((shard / 8 + threads - 1) / threads);
    auto stream = c10::cuda::getCurrentCUDAStream();
    mc_reduce_scatter_kernel<<<blocks, threads, 0, stream>>>(
        (uint64_t)mc_base, reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), shard, rank);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
CPP_SRC = "void mc_reduce_scatter(int64_t mc_base, torch::Tensor out, int64_t shard, int64_t rank);"

_ext = None
_cache = {}


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="mc_rs", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                           functions=["mc_reduce_scatter"])
    return _ext


def _resources(tensor):
    key = (tensor.numel(), tensor.dtype, tensor.device)
    res = _cache.get(key)
    if res is not None:
        return res
    buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    out = torch.empty(tensor.numel() // hdl.world_size, device=tensor.device, dtype=tensor.dtype)
    res = (buf, hdl, out)
    _cache[key] = res
    return res


def solution(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    if world == 1:
        return tensor.clone()
    buf, hdl, out = _resources(tensor)
    if hdl.multicast_ptr == 0 or tensor.dtype != torch.bfloat16:
        # No multicast object on this machine, or not bf16: let NCCL do it.
        out = torch.empty(tensor.numel() // world, device=tensor.device, dtype=tensor.dtype)
        dist.reduce_scatter_tensor(out, tensor.reshape(-1))
        return out
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    _get_ext().mc_reduce_scatter(hdl.multicast_ptr, out, out.numel(), hdl.rank)
    hdl.barrier(channel=0)
    return out
