"""
GEMM + reduce-scatter for one 8-GPU H100 node.

cuBLAS writes the partial product into a symmetric buffer; a vectorized kernel (float4) sums this
rank's row block over the 8 peers with a fully unrolled peer loop.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

REDUCE_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#define WORLD_SIZE 8

__global__ void rs_rows_f4(const uint64_t* __restrict__ ptrs, float4* __restrict__ out, int64_t n4,
                           int64_t offset4) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    #pragma unroll
    for (int p = 0; p < WORLD_SIZE; ++p) {
        float4 v = reinterpret_cast<const float4*>(ptrs[p])[offset4 + i];
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    out[i] = s;
}

torch::Tensor rs_rows(int64_t ptrs, int64_t rows, int64_t cols, int64_t rank, torch::Tensor like) {
    TORCH_CHECK(like.scalar_type() == at::kFloat, "fp32 kernel");
    auto out = torch::empty({rows, cols}, like.options());
    int64_t n4 = rows * cols / 4;
    int threads = 256;
    int64_t blocks = (n4 + threads - 1) / threads;
    rs_rows_f4<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint64_t*>(ptrs), reinterpret_cast<float4*>(out.data_ptr()), n4, rank * n4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = None
_bufs = {}


def _ext_get():
    global _ext
    if _ext is None:
        _ext = load_inline(name="gemm_rs_f4_w8",
                           cpp_sources="torch::Tensor rs_rows(int64_t ptrs, int64_t rows, int64_t cols, "
                                       "int64_t rank, torch::Tensor like);",
                           cuda_sources=REDUCE_SRC, functions=["rs_rows"], with_cuda=True,
                           extra_cuda_cflags=["-O3", "--use_fast_math"])
    return _ext


def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:
    """Rows [rank*M/w, (rank+1)*M/w) of sum_r A_r @ B_r."""
    ext = _ext_get()
    M, N = A_local.shape[0], B_local.shape[1]
    if (M, N) not in _bufs:
        buf = symm_mem.empty((M, N), device=A_local.device, dtype=torch.float32)
        _bufs[(M, N)] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _bufs[(M, N)]
    torch.matmul(A_local.float(), B_local.float(), out=buf)
    hdl.barrier(channel=0)
    rows = M // hdl.world_size
    out = ext.rs_rows(hdl.buffer_ptrs_dev, rows, N, hdl.rank, A_local)
    hdl.barrier(channel=0)
    return out.to(A_local.dtype)
