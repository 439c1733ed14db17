"""
All-gather with a pull kernel: blockIdx.y selects the source rank, blocks along x stride over the
shard with 16-byte loads from that rank's symmetric buffer.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

AG_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void allgather_pull(const uint64_t* __restrict__ ptrs, uint4* __restrict__ out,
                               int64_t shard_vec, int world) {
    const int src_rank = blockIdx.y;
    if (src_rank >= num_peers) return;
    const uint4* src = reinterpret_cast<const uint4*>(ptrs[src_rank]);
    uint4* dst = out + (int64_t)src_rank * shard_vec;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < shard_vec;
         i += (int64_t)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

torch::Tensor allgather(int64_t ptrs, torch::Tensor like, int64_t world) {
    const int64_t bytes = like.numel() * like.element_size();
    TORCH_CHECK(bytes % 16 == 0, "shard must be a multiple of 16 bytes");
    std::vector<int64_t> shape{world};
    for (auto s : like.sizes()) shape.push_back(s);
    auto out = torch::empty(shape, like.options());
    const int64_t shard_vec = bytes / 16;
    dim3 grid((unsigned)std::min<int64_t>((shard_vec + 255) / 256, 64), (unsigned)world);
    allgather_pull<<<grid, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint64_t*>(ptrs), reinterpret_cast<uint4*>(out.data_ptr()), shard_vec,
        (int)world);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = None
_bufs = {}


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="allgather_pull_v16",
            cpp_sources="torch::Tensor allgather(int64_t ptrs, torch::Tensor like, int64_t world);",
            cuda_sources=AG_SRC,
            functions=["allgather"],
            with_cuda=True,
            extra_cuda_cflags=["-O3"],
        )
    return _ext


def _get_buf(tensor):
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _bufs:
        buf = symm_mem.empty(tensor.shape, device=tensor.device, dtype=tensor.dtype)
        _bufs[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    return _bufs[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """[world, *shape] gather of every rank's tensor."""
    ext = _get_ext()
    buf, hdl = _get_buf(tensor)
    buf.copy_(tensor)
    hdl.barrier(channel=0)
    out = ext.allgather(hdl.buffer_ptrs_dev, tensor, hdl.world_size)
    hdl.barrier(channel=0)
    return out
