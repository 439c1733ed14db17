"""
All-gather through symmetric memory with a host bounce.

Peer memory is mapped into this process, so each peer's shard is read through a tensor view of
its symmetric buffer. To stay robust on systems without NVLink P2P, the shard is staged through
host memory (device -> host -> device) before it is written into the output by a small kernel.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SCATTER_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// out[slot] = shard, 4 floats per thread with a scalar tail
__global__ void place_shard(const float* __restrict__ shard, float* __restrict__ out, int64_t n, int slot) {
    float* dst = out + (int64_t)slot * n;
    int64_t n4 = n / 4;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = t; i < n4; i += stride) {
        reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(shard)[i];
    }
    for (int64_t i = 4 * n4 + t; i < n; i += stride) dst[i] = shard[i];
}

void place(torch::Tensor shard, torch::Tensor out, int64_t slot) {
    TORCH_CHECK(shard.scalar_type() == at::kFloat, "fp32 only");
    int64_t n = shard.numel();
    int blocks = (int)std::min<int64_t>((n / 4 + 255) / 256 + 1, 1024);
    place_shard<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(shard.data_ptr<float>(),
                                                                        out.data_ptr<float>(), n, (int)slot);
}
"""

_ext = None
_cache = {}


def _setup(tensor):
    global _ext
    if _ext is None:
        _ext = load_inline(name="allgather_host_bounce", cpp_sources="void place(torch::Tensor shard, torch::Tensor out, int64_t slot);",
                           cuda_sources=SCATTER_SRC, functions=["place"], with_cuda=True)
    key = (tensor.numel(), tensor.dtype)
    if key not in _cache:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        views = [hdl.get_buffer(r, (tensor.numel(),), torch.float32) for r in range(hdl.world_size)]
        _cache[key] = (buf, hdl, views)
    return _cache[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    buf, hdl, views = _setup(tensor)
    n = tensor.numel()
    buf.copy_(tensor.reshape(-1).float())
    hdl.barrier(channel=0)
    out = torch.empty((hdl.world_size, n), device=tensor.device, dtype=torch.float32)
    for r in range(hdl.world_size):
        host = views[r].cpu()                                   # peer shard -> host
        shard = host.to(tensor.device, non_blocking=False)      # host -> our GPU
        _ext.place(shard, out, r)
    hdl.barrier(channel=0)
    return out.view((hdl.world_size,) + tuple(tensor.shape)).to(tensor.dtype)
