"""
MoE token dispatch (capacity-padded all-to-all) with a pull kernel.

tokens[j] on rank r is the block of tokens r routes to rank j. After publishing `tokens` in a
symmetric buffer, rank r pulls block r of every peer j: out[j] = tokens_j[r]. One CUDA block per
(source rank, token) pair, float4 loads along the hidden dimension.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

DISPATCH_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void moe_dispatch_pull(const uint64_t* __restrict__ peer_ptrs, float4* __restrict__ out,
                                  int capacity, int hidden4, int rank) {
    const int src = blockIdx.y;                 // source rank
    const int tok = blockIdx.x;                 // token slot
    const float4* peer = reinterpret_cast<const float4*>(peer_ptrs[src]);
    const int64_t src_off = ((int64_t)rank * capacity + tok) * hidden4;
    const int64_t dst_off = ((int64_t)src * capacity + tok) * hidden4;
    for (int h = threadIdx.x; h < hidden4; h += blockDim.x) {
        out[dst_off + h] = peer[src_off + h];
    }
}

torch::Tensor dispatch(int64_t peer_ptrs, int64_t world, int64_t capacity, int64_t hidden, int64_t rank,
                       torch::Tensor like) {
    TORCH_CHECK(hidden % 4 == 0, "hidden must be a multiple of 4 for float4 loads");
    auto out = torch::empty({world, capacity, hidden}, like.options());
    dim3 grid((unsigned)capacity, (unsigned)world);
    moe_dispatch_pull<<<grid, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint64_t*>(peer_ptrs), reinterpret_cast<float4*>(out.data_ptr()),
        (int)capacity, (int)(hidden / 4), (int)rank);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = None
_buffers = {}


def _load():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="moe_dispatch_pull",
            cpp_sources="torch::Tensor dispatch(int64_t peer_ptrs, int64_t world, int64_t capacity, "
                        "int64_t hidden, int64_t rank, torch::Tensor like);",
            cuda_sources=DISPATCH_SRC,
            functions=["dispatch"],
            with_cuda=True,
            extra_cuda_cflags=["-O3"],
        )
    return _ext


def solution(tokens: torch.Tensor) -> torch.Tensor:
    """tokens: [world, capacity, hidden] -> [world, capacity, hidden] dispatched tokens."""
    assert dist.get_world_size() == 8, "kernel is tuned for one 8-GPU node"
    assert tokens.dtype == torch.float32, "float4 path expects fp32 tokens"
    assert tokens.is_contiguous()
    ext = _load()
    world, capacity, hidden = tokens.shape
    key = tuple(tokens.shape)
    if key not in _buffers:
        buf = symm_mem.empty(tokens.shape, device=tokens.device, dtype=tokens.dtype)
        _buffers[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _buffers[key]
    buf.copy_(tokens)
    hdl.barrier(channel=0)
    out = ext.dispatch(hdl.buffer_ptrs_dev, world, capacity, hidden, hdl.rank, tokens)
    hdl.barrier(channel=0)
    return out
