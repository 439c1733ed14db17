"""
All-to-all via peer DMA.

Our own chunk stays local (device copy); the chunk destined for the peer is fetched by the peer
itself: each rank pulls `its` chunk out of the peer's symmetric send buffer with one
cudaMemcpyAsync (cudaMemcpyDefault resolves the peer address through UVA, so the copy engine
reads over NVLink).
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

A2A_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

// Copy `bytes` from src (possibly on another GPU) to dst on the current stream.
void copy_chunk(int64_t dst, int64_t src, int64_t bytes) {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    cudaError_t err = cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
                                      (size_t)bytes, cudaMemcpyDefault, stream);
    TORCH_CHECK(err == cudaSuccess, "cudaMemcpyAsync: ", cudaGetErrorString(err));
}

// Validate that the symmetric buffer is big enough and aligned for 16-byte DMA bursts.
void check_layout(int64_t base, int64_t bytes, int64_t world) {
    TORCH_CHECK(base % 16 == 0, "symmetric buffer is not 16-byte aligned");
    TORCH_CHECK(bytes % world == 0, "tensor does not split evenly into world chunks");
}
"""

_ext = None
_symm = {}


def _init(tensor):
    global _ext
    if _ext is None:
        _ext = load_inline(name="a2a_peer_dma",
                           cpp_sources="void copy_chunk(int64_t dst, int64_t src, int64_t bytes);\n"
                                       "void check_layout(int64_t base, int64_t bytes, int64_t world);",
                           cuda_sources=A2A_SRC, functions=["copy_chunk", "check_layout"],
                           with_cuda=True)
    key = (tensor.numel(), tensor.dtype)
    if key not in _symm:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _ext.check_layout(buf.data_ptr(), tensor.numel() * tensor.element_size(), hdl.world_size)
        _symm[key] = (buf, hdl)
    return _symm[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Equal-split all-to-all along dim 0."""
    buf, hdl = _init(tensor)
    rank = hdl.rank
    world = hdl.world_size
    chunk_bytes = tensor.numel() * tensor.element_size() // world
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)                         # send buffers are filled everywhere

    out = torch.empty_like(tensor)
    out_base = out.data_ptr()
    # own chunk: local copy
    _ext.copy_chunk(out_base + rank * chunk_bytes, buf.data_ptr() + rank * chunk_bytes, chunk_bytes)
    # the other rank's chunk for us: pull it with the copy engine
    peer = 1 - rank
    peer_base = hdl.buffer_ptrs[peer]
    _ext.copy_chunk(out_base + peer * chunk_bytes, peer_base + rank * chunk_bytes, chunk_bytes)
    return out
