"""
Broadcast through NVLink SHARP multicast.

Rank 0 stages its tensor in a symmetric buffer and a kernel writes it once to the buffer's
multicast address with `multimem.st`: the NVSwitch replicates every store to all GPUs, so the
root sends each byte over its link once regardless of the world size. Barriers around the
kernel order the stores against the readers.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

MC_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// root: read the local buffer, store every 16 bytes to the multicast address
__global__ void mc_broadcast_kernel(const float4* __restrict__ local, float4* mc, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = local[i];
        asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "l"(mc + i), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
    }
}

__global__ void mc_broadcast_tail(const float* __restrict__ local, float* mc, int64_t start, int64_t n) {
    int64_t i = start + threadIdx.x;
    if (i < n) {
        asm volatile("multimem.st.relaxed.sys.global.f32 [%0], %1;" :: "l"(mc + i), "f"(local[i]) : "memory");
    }
}

void mc_broadcast(torch::Tensor local, int64_t mc_ptr) {
    TORCH_CHECK(local.scalar_type() == at::kFloat, "fp32 buffer expected");
    int64_t n = local.numel(), n4 = n / 4;
    auto stream = c10::cuda::getCurrentCUDAStream();
    int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((n4 + 511) / 512, 264));
    mc_broadcast_kernel<<<blocks, 512, 0, stream>>>(reinterpret_cast<const float4*>(local.data_ptr<float>()),
                                                  reinterpret_cast<float4*>(mc_ptr), n4);
    if (n % 4) {
        mc_broadcast_tail<<<1, 32, 0, stream>>>(local.data_ptr<float>(), reinterpret_cast<float*>(mc_ptr), 4 * n4, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_bufs = {}


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Return rank 0's tensor on every rank."""
    assert tensor.dtype == torch.float32, "multimem v4.f32 path: fp32 only"
    ext = load_inline(name="nvls_broadcast_f32", cpp_sources="void mc_broadcast(torch::Tensor local, int64_t mc_ptr);",
                      cuda_sources=MC_SRC, functions=["mc_broadcast"], with_cuda=True,
                      extra_cuda_cflags=["-O3", "-arch=sm_90"])
    n = tensor.numel()
    if n not in _bufs:
        buf = symm_mem.empty(n, device=tensor.device, dtype=torch.float32)
        _bufs[n] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _bufs[n]
    hdl.barrier(channel=0)                 # nobody still reads the previous call's data
    if hdl.rank == 0:
        buf.copy_(tensor.reshape(-1))
        ext.mc_broadcast(buf, hdl.multicast_ptr)
    hdl.barrier(channel=0)                 # multicast stores have landed everywhere
    return buf.clone().view_as(tensor)
