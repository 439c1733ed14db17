"""
All-gather with the copy engines.

Each rank publishes its shard in a symmetric buffer; after a barrier every rank pulls every
peer's shard with a device-to-device copy from a tensor view of the peer's buffer
(`hdl.get_buffer(peer, ...)`). The copies are DMA transfers over NVLink, no SM work needed.
The small pack kernel only handles the non-contiguous input case.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// Byte-wise pack into the symmetric buffer: 16-byte chunks, then a byte tail.
__global__ void pack_bytes_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                  int64_t nbytes) {
    int64_t nvec = nbytes / 16;
    int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = tid; i < nvec; i += stride) {
        reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
    }
    for (int64_t i = nvec * 16 + tid; i < nbytes; i += stride) {
        dst[i] = src[i];
    }
}

void pack_into(torch::Tensor src, int64_t dst_ptr) {
    TORCH_CHECK(src.is_cuda(), "src must be CUDA");
    TORCH_CHECK(src.is_contiguous(), "call .contiguous() first");
    int64_t nbytes = src.numel() * src.element_size();
    int threads = 256;
    int blocks = (int)std::min<int64_t>((nbytes / 16 + threads - 1) / threads + 1, 1024);
    pack_bytes_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint8_t*>(src.data_ptr()), reinterpret_cast<uint8_t*>(dst_ptr), nbytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_state = {}


def _setup(tensor):
    key = (tuple(tensor.shape), tensor.dtype)
    if key in _state:
        return _state[key]
    if "ext" not in _state:
        _state["ext"] = load_inline(
            name="pkb_allgather_ce_pack",
            cpp_sources="void pack_into(torch::Tensor src, int64_t dst_ptr);",
            cuda_sources=CUDA_SRC,
            functions=["pack_into"],
            with_cuda=True,
            extra_cuda_cflags=["-O3"],
        )
    buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    peers = [hdl.get_buffer(r, tuple(tensor.shape), tensor.dtype) for r in range(hdl.world_size)]
    _state[key] = (buf, hdl, peers)
    return _state[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Gather every rank's `tensor` into a [world, *shape] result."""
    buf, hdl, peers = _setup(tensor)
    ext = _state["ext"]
    ext.pack_into(tensor.contiguous(), buf.data_ptr())
    hdl.barrier(channel=0)
    out = torch.empty((hdl.world_size,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
    for i in range(hdl.world_size):
        r = (hdl.rank + i) % hdl.world_size      # stagger so ranks do not all hit rank 0 first
        out[r].copy_(peers[r], non_blocking=True)  # peer -> local DMA copy
    hdl.barrier(channel=0)
    return out
