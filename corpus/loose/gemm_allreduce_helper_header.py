"""
GEMM + all-reduce (problem 13) using a reusable communication helper header.

The partial GEMM goes into a symmetric buffer via cuBLAS; `pkb_comm::oneshot_reduce` from the
shared helper header sums the partials of all ranks. The helper takes the symmetric handle's
device pointer table; its implementation lives in my_comm_utils.cuh next to this file.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

HERE = os.path.dirname(os.path.abspath(__file__))

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "my_comm_utils.cuh"

__global__ void reduce_partials_kernel(const uint64_t* __restrict__ table, float* __restrict__ out,
                                       int64_t n, int world) {
    pkb_comm::PeerTable peers(table, world);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = pkb_comm::oneshot_reduce<float>(peers, i);
    }
}

torch::Tensor reduce_partials(int64_t table, torch::Tensor like, int64_t world) {
    TORCH_CHECK(like.scalar_type() == at::kFloat, "fp32 partials");
    auto out = torch::empty_like(like);
    int64_t n = out.numel();
    int blocks = (int)std::min<int64_t>((n + 511) / 512, 1024);
    reduce_partials_kernel<<<blocks, 512, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint64_t*>(table), out.data_ptr<float>(), n, (int)world);
    return out;
}
"""

_ext = None
_ctx = {}


def _load():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="gemm_ar_helper",
            cpp_sources="torch::Tensor reduce_partials(int64_t table, torch::Tensor like, int64_t world);",
            cuda_sources=CUDA_SRC,
            functions=["reduce_partials"],
            with_cuda=True,
            extra_cuda_cflags=["-O3"],
            extra_include_paths=[HERE],
        )
    return _ext


def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:
    ext = _load()
    M, N = A_local.shape[0], B_local.shape[1]
    if (M, N) not in _ctx:
        buf = symm_mem.empty((M, N), device=A_local.device, dtype=torch.float32)
        _ctx[(M, N)] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _ctx[(M, N)]
    torch.matmul(A_local.float(), B_local.float(), out=buf)
    hdl.barrier(channel=0)
    out = ext.reduce_partials(hdl.buffer_ptrs_dev, buf, hdl.world_size)
    hdl.barrier(channel=0)
    return out.to(A_local.dtype)
