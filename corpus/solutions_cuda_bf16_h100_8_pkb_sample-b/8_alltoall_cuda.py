"""
All-to-all by peer stores: every rank writes chunk p of its input into slot `rank` of peer p's
symmetric buffer, then a barrier, then each rank copies its buffer out.

The binding declares the peer-pointer array as a tensor, but the call passes the handle's
`buffer_ptrs_dev`, which is an integer address.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

__global__ void push_chunks_kernel(const int64_t* __restrict__ ptrs, const __nv_bfloat16* __restrict__ inp,
                                   int64_t chunk, int64_t rank, int64_t world) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunk * world; i += stride) {
        int64_t peer = i / chunk;
        __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(ptrs[peer]);
        dst[rank * chunk + (i % chunk)] = inp[i];   // store into the peer's buffer
    }
}

void alltoall_push(torch::Tensor ptrs, torch::Tensor inp, int64_t chunk, int64_t rank, int64_t world) {
    const int threads = 512;
    const int blocks = (int)std::min<int64_t>((chunk * world + threads - 1) / threads, 528);
    auto stream = c10::cuda::getCurrentCUDAStream();
    push_chunks_kernel<<<blocks, threads, 0, stream>>>(
        ptrs.data_ptr<int64_t>(), reinterpret_cast<const __nv_bfloat16*>(inp.data_ptr()), chunk, rank, world);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
CPP_SRC = "void alltoall_push(torch::Tensor ptrs, torch::Tensor inp, int64_t chunk, int64_t rank, int64_t world);"

_state = {}


def _setup(tensor):
    key = (tensor.numel(), tensor.dtype)
    if key not in _state:
        ext = load_inline(name="a2a_push", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["alltoall_push"])
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _state[key] = (ext, buf, hdl)
    return _state[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    ext, buf, hdl = _setup(tensor)
    chunk = tensor.numel() // hdl.world_size
    hdl.barrier(channel=0)
    ext.alltoall_push(hdl.buffer_ptrs_dev, tensor.reshape(-1), chunk, hdl.rank, hdl.world_size)
    hdl.barrier(channel=0)
    return buf.view_as(tensor).clone()
