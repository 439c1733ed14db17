"""
One-shot all-reduce over torch symmetric memory.

Every rank copies its input into a symmetric buffer, then one kernel reads the same slice of
every peer's buffer through the device array of peer pointers and writes the sum locally.
Barriers before (inputs are in place) and after (nobody rewrites a buffer a peer still reads).
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

template <typename T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// ptrs: device array of world_size peer base addresses (hdl.buffer_ptrs_dev)
template <typename T>
__global__ void allreduce_sum_kernel(const uint64_t* __restrict__ ptrs, T* __restrict__ out,
                                     int64_t n, int world_size) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = 0.f;
        #pragma unroll 4
        for (int r = 0; r < world_size; ++r) {
            const T* src = reinterpret_cast<const T*>(ptrs[r]);
            acc += to_f<T>(src[i]);          // peer load over NVLink
        }
        out[i] = from_f<T>(acc);
    }
}

torch::Tensor allreduce_from_peers(int64_t ptrs_dev, torch::Tensor out, int64_t world_size) {
    TORCH_CHECK(out.is_cuda() && out.is_contiguous(), "out must be a contiguous CUDA tensor");
    const int64_t n = out.numel();
    const int threads = 512;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 132 * 4);
    auto stream = c10::cuda::getCurrentCUDAStream();
    const uint64_t* ptrs = reinterpret_cast<const uint64_t*>(ptrs_dev);
    if (out.scalar_type() == at::kBFloat16) {
        allreduce_sum_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
            ptrs, reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), n, (int)world_size);
    } else {
        TORCH_CHECK(out.scalar_type() == at::kFloat, "only bf16 / fp32 supported");
        allreduce_sum_kernel<float><<<blocks, threads, 0, stream>>>(
            ptrs, out.data_ptr<float>(), n, (int)world_size);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

CPP_SRC = "torch::Tensor allreduce_from_peers(int64_t ptrs_dev, torch::Tensor out, int64_t world_size);"

_ext = None
_cache = {}


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="pkb_allreduce_sm_load",
            cpp_sources=CPP_SRC,
            cuda_sources=CUDA_SRC,
            functions=["allreduce_from_peers"],
            with_cuda=True,
            extra_cuda_cflags=["-O3", "-arch=sm_90"],
        )
    return _ext


def _get_buffer(numel, dtype, device):
    key = (numel, dtype, device)
    if key not in _cache:
        buf = symm_mem.empty(numel, device=device, dtype=dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _cache[key] = (buf, hdl)
    return _cache[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Sum all-reduce of `tensor` across all ranks."""
    ext = _get_ext()
    flat = tensor.contiguous().view(-1)
    buf, hdl = _get_buffer(flat.numel(), flat.dtype, flat.device)
    buf.copy_(flat)
    hdl.barrier(channel=0)          # every rank's input is in its symmetric buffer
    out = torch.empty_like(flat)
    ext.allreduce_from_peers(hdl.buffer_ptrs_dev, out, hdl.world_size)
    hdl.barrier(channel=0)          # peers are done reading our buffer before we reuse it
    return out.view_as(tensor)
