"""
Vectorized one-shot all-reduce on symmetric memory (bf16).

Each thread loads 8 bf16 values (one 16-byte vector) from every rank's symmetric buffer,
accumulates in fp32 and stores the sum. A barrier makes sure all inputs are published before
the kernel reads them.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

__global__ void allreduce_vec8_kernel(const uint64_t* __restrict__ peer_ptrs,
                                      __nv_bfloat16* __restrict__ out, int64_t n_vec, int world) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_vec) return;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < world; ++r) {
        const uint4* src = reinterpret_cast<const uint4*>(peer_ptrs[r]);
        uint4 v = src[idx];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 f = __bfloat1622float2(h[j]);
            acc[2 * j] += f.x;
            acc[2 * j + 1] += f.y;
        }
    }
    uint4 res;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&res);
    #pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
    reinterpret_cast<uint4*>(out)[idx] = res;
}

torch::Tensor allreduce_bf16(int64_t peer_ptrs, torch::Tensor out, int64_t world) {
    TORCH_CHECK(out.scalar_type() == at::kBFloat16, "expected bfloat16");
    int64_t n_vec = out.numel() / 8;       // 8 bf16 per 16-byte vector
    int threads = 256;
    int64_t blocks = (n_vec + threads - 1) / threads;
    if (blocks > 0) {
        allreduce_vec8_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            reinterpret_cast<const uint64_t*>(peer_ptrs),
            reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), n_vec, (int)world);
    }
    return out;
}
"""

cpp_source = "torch::Tensor allreduce_bf16(int64_t peer_ptrs, torch::Tensor out, int64_t world);"

_module = None
_symm = {}


def get_module():
    global _module
    if _module is None:
        _module = load_inline(
            name="allreduce_vec8",
            cpp_sources=cpp_source,
            cuda_sources=cuda_source,
            functions=["allreduce_bf16"],
            with_cuda=True,
            extra_cuda_cflags=["-O3", "--use_fast_math"],
        )
    return _module


def solution(tensor: torch.Tensor) -> torch.Tensor:
    mod = get_module()
    n = tensor.numel()
    if n not in _symm:
        buf = symm_mem.empty(n, dtype=tensor.dtype, device=tensor.device)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        _symm[n] = (buf, hdl)
    buf, hdl = _symm[n]
    buf.copy_(tensor.view(-1))
    hdl.barrier()
    out = torch.empty_like(tensor)
    mod.allreduce_bf16(hdl.buffer_ptrs_dev, out, hdl.world_size)
    return out
