"""
NVLink SHARP (NVLS) all-reduce through the multicast address of a symmetric buffer.

Rank r owns slice r of the vector. It reduces that slice across all GPUs with one
`multimem.ld_reduce` per 16 bytes (the switch does the adds) and writes the sum back to every GPU
with `multimem.st`. A scalar path handles the last n % 4 elements. Requires a multicast-capable
NVSwitch system; without one we fail loudly at set-up instead of reading address 0.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

NVLS_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float4 mm_ld_reduce_v4(const float* mc) {
    float4 r;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(mc) : "memory");
    return r;
}
__device__ __forceinline__ void mm_st_v4(float* mc, float4 v) {
    asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(mc), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
__device__ __forceinline__ float mm_ld_reduce(const float* mc) {
    float r;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(r) : "l"(mc) : "memory");
    return r;
}
__device__ __forceinline__ void mm_st(float* mc, float v) {
    asm volatile("multimem.st.relaxed.sys.global.f32 [%0], %1;" :: "l"(mc), "f"(v) : "memory");
}

__global__ void nvls_allreduce_kernel(float* mc_base, int64_t n, int rank, int world) {
    const int64_t n4 = n / 4;
    const int64_t per = (n4 + world - 1) / world;
    const int64_t lo = rank * per, hi = min(n4, lo + per);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = lo + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += stride) {
        float* p = mc_base + 4 * i;
        mm_st_v4(p, mm_ld_reduce_v4(p));
    }
    // tail: the last n % 4 elements are done by rank 0
    if (rank == 0 && blockIdx.x == 0 && threadIdx.x < (n & 3)) {
        float* p = mc_base + 4 * n4 + threadIdx.x;
        mm_st(p, mm_ld_reduce(p));
    }
}

void nvls_allreduce(int64_t mc_ptr, int64_t n, int64_t rank, int64_t world) {
    TORCH_CHECK(mc_ptr != 0, "multicast address is null");
    TORCH_CHECK(mc_ptr % 16 == 0, "multicast base must be 16-byte aligned");
    int64_t per = (n / 4 + world - 1) / world;
    int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((per + 511) / 512, 132));
    nvls_allreduce_kernel<<<blocks, 512, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<float*>(mc_ptr), n, (int)rank, (int)world);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = None
_bufs = {}


def _setup(n, device):
    global _ext
    if _ext is None:
        _ext = load_inline(name="nvls_allreduce_f32", cpp_sources="void nvls_allreduce(int64_t mc_ptr, int64_t n, int64_t rank, int64_t world);",
                           cuda_sources=NVLS_SRC, functions=["nvls_allreduce"], with_cuda=True,
                           extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"])
    if n not in _bufs:
        buf = symm_mem.empty(n, device=device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        if hdl.multicast_ptr == 0:
            raise RuntimeError("NVLS all-reduce needs multicast support (NVSwitch with multicast objects)")
        _bufs[n] = (buf, hdl)
    return _bufs[n]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    n = tensor.numel()
    buf, hdl = _setup(n, tensor.device)
    buf.copy_(tensor.reshape(-1).float())
    hdl.barrier(channel=0)                    # every GPU's input is in place
    _ext.nvls_allreduce(hdl.multicast_ptr, n, hdl.rank, hdl.world_size)
    hdl.barrier(channel=0)                    # every slice has been multicast back
    return buf.clone().view_as(tensor).to(tensor.dtype)
