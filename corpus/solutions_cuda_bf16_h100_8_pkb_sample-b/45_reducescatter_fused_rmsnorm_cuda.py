"""
Fused reduce-scatter + RMSNorm: a single kernel, one warp per output row.

Each warp averages its row of this rank's chunk over all ranks' symmetric buffers (peer loads),
computes the mean square with warp shuffles and writes the normalised row. One launch per call.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

FUSED_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

#define MAX_PER_LANE 64     // hidden <= 2048

__global__ void fused_rs_rmsnorm(const uint64_t* __restrict__ ptrs, const __nv_bfloat16* __restrict__ weight,
                                 __nv_bfloat16* __restrict__ out, int rows, int hidden, int rank,
                                 int world, float eps) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    int64_t base = ((int64_t)rank * rows + warp) * hidden;
    float vals[MAX_PER_LANE];
    float ss = 0.f;
    int cnt = 0;
    for (int h = lane; h < hidden; h += 32, ++cnt) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) {
            s += __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(ptrs[p])[base + h]);
        }
        s /= world; vals[cnt] = s;          // the mean over ranks
        ss += s * s;
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = rsqrtf(ss / hidden + eps);
    cnt = 0;
    for (int h = lane; h < hidden; h += 32, ++cnt) {
        out[(int64_t)warp * hidden + h] = __float2bfloat16(vals[cnt] * inv * __bfloat162float(weight[h]));
    }
}

torch::Tensor run(int64_t ptrs, torch::Tensor weight, int64_t rows, int64_t rank, int64_t world, double eps) {
    int hidden = weight.numel();
    TORCH_CHECK(hidden <= 32 * MAX_PER_LANE, "hidden too large");
    auto out = torch::empty({rows, (int64_t)hidden}, weight.options());
    int threads = 256;
    int blocks = (int)((rows * 32 + threads - 1) / threads);
    fused_rs_rmsnorm<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        (const uint64_t*)ptrs, (const __nv_bfloat16*)weight.data_ptr(), (__nv_bfloat16*)out.data_ptr(),
        (int)rows, hidden, (int)rank, (int)world, (float)eps);
    return out;
}
"""

_mod = None
_cache = {}


def solution(rs_input_1d, gamma, eps):
    global _mod
    if _mod is None:
        _mod = load_inline(name="fused_rs_rmsnorm_warp",
                           cpp_sources="torch::Tensor run(int64_t ptrs, torch::Tensor weight, int64_t rows, "
                                       "int64_t rank, int64_t world, double eps);",
                           cuda_sources=FUSED_SRC, functions=["run"], with_cuda=True,
                           extra_cuda_cflags=["-O3"])
    if rs_input_1d.shape not in _cache:
        buf = symm_mem.empty(rs_input_1d.shape, device=rs_input_1d.device, dtype=rs_input_1d.dtype)
        _cache[rs_input_1d.shape] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _cache[rs_input_1d.shape]
    buf.copy_(rs_input_1d)
    rows = rs_input_1d.numel() // hdl.world_size // gamma.numel()   # the flat [world * rows * hidden] buffer
    return _mod.run(hdl.buffer_ptrs_dev, gamma.contiguous(), rows, hdl.rank, hdl.world_size, eps)
