"""
Reduce-scatter with a custom CUDA kernel on symmetric memory.

Each rank reads its own chunk (rows [rank*R, (rank+1)*R)) from every peer's symmetric buffer
and sums it in fp32. Barriers around the kernel keep the ranks in step.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_CODE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename scalar_t> __device__ __forceinline__ scalar_t from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename scalar_t>
__global__ void rs_kernel(const long long* __restrict__ ptrs, scalar_t* __restrict__ out,
                          long long chunk, int rank, int world) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunk) return;
    float s = 0.0f;
    for (int p = 0; p < world; ++p) {
        const scalar_t* peer = reinterpret_cast<const scalar_t*>(ptrs[p]);
        s += to_float(peer[(long long)rank * chunk + i]);
    }
    out[i] = from_float<scalar_t>(s);
}

void reduce_scatter(int64_t ptrs, torch::Tensor out, int64_t rank, int64_t world) {
    const long long chunk = out.numel();
    const int threads = 256;
    const int blocks = (int)((chunk + threads - 1) / threads);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (out.scalar_type() == at::kBFloat16) {
        rs_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
            (const long long*)ptrs, (__nv_bfloat16*)out.data_ptr(), chunk, (int)rank, (int)world);
    } else {
        rs_kernel<float><<<blocks, threads, 0, stream>>>(
            (const long long*)ptrs, out.data_ptr<float>(), chunk, (int)rank, (int)world);
    }
}
"""


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Sum reduce-scatter along dim 0."""
    ext = load_inline(
        name="rs_symm",
        cpp_sources="void reduce_scatter(int64_t ptrs, torch::Tensor out, int64_t rank, int64_t world);",
        cuda_sources=CUDA_CODE,
        functions=["reduce_scatter"],
        with_cuda=True,
        extra_cuda_cflags=["-O3"],
    )
    world = dist.get_world_size()
    rank = dist.get_rank()

    # symmetric staging buffer for this call's input
    symm_buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
    handle = symm_mem.rendezvous(symm_buf, dist.group.WORLD)
    symm_buf.copy_(tensor.reshape(-1))
    handle.barrier(channel=0)

    out = torch.empty((tensor.shape[0] // world,) + tuple(tensor.shape[1:]),
                      dtype=tensor.dtype, device=tensor.device)
    ext.reduce_scatter(handle.buffer_ptrs_dev, out, rank, world)
    handle.barrier(channel=0)
    return out
