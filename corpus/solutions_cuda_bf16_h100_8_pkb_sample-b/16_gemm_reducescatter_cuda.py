"""
GEMM + reduce-scatter.

The partial product is written straight into a symmetric buffer by cuBLAS (matmul(out=...)),
so no extra copy is needed. A custom kernel then sums this rank's row block over all peers'
buffers (peer loads through buffer_ptrs_dev).
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

__global__ void rows_reduce_kernel(const uint64_t* __restrict__ ptrs, __nv_bfloat16* __restrict__ out,
                                   int64_t block_elems, int64_t offset, int world) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < block_elems;
         i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) {
            s += __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(ptrs[p])[offset + i]);
        }
        out[i] = __float2bfloat16(s);
    }
}

torch::Tensor rows_reduce(int64_t ptrs, int64_t rows, int64_t cols, int64_t rank, int64_t world,
                          torch::Tensor like) {
    auto out = torch::empty({rows, cols}, like.options());
    int64_t n = rows * cols;
    int blocks = (int)std::min<int64_t>((n + 255) / 256, 2048);
    rows_reduce_kernel<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint64_t*>(ptrs), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
        n, rank * n, (int)world);
    return out;
}
"""

_ext = None
_symm = {}


def _ext_mod():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="gemm_rs_rows_reduce",
            cpp_sources="torch::Tensor rows_reduce(int64_t ptrs, int64_t rows, int64_t cols, int64_t rank, "
                        "int64_t world, torch::Tensor like);",
            cuda_sources=SRC,
            functions=["rows_reduce"],
            with_cuda=True,
        )
    return _ext


def solution(A_local, B_local):
    ext = _ext_mod()
    M, N = A_local.shape[0], B_local.shape[1]
    key = (M, N, A_local.dtype)
    if key not in _symm:
        buf = symm_mem.empty((M, N), device=A_local.device, dtype=A_local.dtype)
        _symm[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _symm[key]
    world, rank = hdl.world_size, hdl.rank

    torch.matmul(A_local, B_local, out=buf)
    torch.cuda.synchronize()          # make sure the GEMM has landed before peers look at it
    hdl.barrier(channel=0)
    out = ext.rows_reduce(hdl.buffer_ptrs_dev, M // world, N, rank, world, A_local)
    hdl.barrier(channel=0)
    return out
