"""
All-gather using peer-to-peer DMA (cudaMemcpyPeerAsync) between symmetric buffers.

Every rank copies its shard into a symmetric buffer; after a barrier, each rank issues one
cudaMemcpyPeerAsync per peer on the current stream to pull the shards into the output.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <vector>

// Pull every peer's shard into out (shape [world, ...]) with peer DMA copies.
void gather_peers(std::vector<int64_t> peer_ptrs, torch::Tensor out, int64_t rank) {
    TORCH_CHECK(out.is_cuda(), "out must live on the GPU");
    const int world = (int)peer_ptrs.size();
    const size_t shard_bytes = (size_t)(out.numel() / world) * out.element_size();
    int cur_dev = 0;
    cudaGetDevice(&cur_dev);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    char* dst = reinterpret_cast<char*>(out.data_ptr());
    for (int i = 0; i < world; ++i) {
        int peer = (int)((rank + i) % world);
        cudaError_t err = cudaMemcpyPeerAsync(dst + (size_t)peer * shard_bytes, cur_dev,
                                              reinterpret_cast<const void*>(peer_ptrs[peer]), peer,
                                              shard_bytes, stream);
        TORCH_CHECK(err == cudaSuccess, "cudaMemcpyPeerAsync failed: ", cudaGetErrorString(err));
    }
}

// Enable peer access once so the DMA engine can read the peers directly.
void enable_peers(int64_t world) {
    int cur = 0;
    cudaGetDevice(&cur);
    for (int d = 0; d < world; ++d) {
        if (d == cur) continue;
        int ok = 0;
        cudaDeviceCanAccessPeer(&ok, cur, d);
        if (ok) {
            cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        }
    }
}
"""

cpp_src = """
void gather_peers(std::vector<int64_t> peer_ptrs, torch::Tensor out, int64_t rank);
void enable_peers(int64_t world);
"""

_ext = None
_resources = {}


def _load():
    global _ext
    if _ext is None:
        _ext = load_inline(name="allgather_peer_dma", cpp_sources=cpp_src, cuda_sources=cuda_src,
                           functions=["gather_peers", "enable_peers"], with_cuda=True,
                           extra_cuda_cflags=["-O2"])
        _ext.enable_peers(dist.get_world_size())
    return _ext


def solution(tensor):
    ext = _load()
    rank = dist.get_rank()
    world = dist.get_world_size()
    key = (tensor.shape, tensor.dtype)
    if key not in _resources:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=tensor.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _resources[key] = (buf, hdl)
    buf, hdl = _resources[key]

    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)  # all shards published

    out = torch.empty((world,) + tuple(tensor.shape), device=tensor.device, dtype=tensor.dtype)
    ext.gather_peers(list(hdl.buffer_ptrs), out, rank)

    # rank 0 waits for everybody before the buffers get reused
    if rank == 0:
        hdl.barrier(channel=0)
    return out
