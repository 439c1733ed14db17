"""
Broadcast from rank 0 using Hopper's TMA bulk-copy engine.

Rank 0 publishes its tensor in a symmetric buffer. Every other rank launches a kernel in which
one elected thread per block pulls 32 KiB chunks of rank 0's buffer into shared memory with
`cp.async.bulk` (completion tracked by an mbarrier) and writes them out to local memory with a
bulk store. Buffers are padded to 16 bytes so bulk copies never need a scalar tail.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

#define CHUNK_BYTES 32768

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t phase) {
    asm volatile(
        "{\n\t.reg .pred ready;\n"
        "TRY_AGAIN:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n\t"
        "@!ready bra TRY_AGAIN;\n}\n" :: "r"(bar), "r"(phase) : "memory");
}

__global__ void tma_pull_kernel(const uint8_t* __restrict__ root_buf, uint8_t* __restrict__ dst,
                                int64_t nbytes) {
    __shared__ alignas(128) uint8_t stage[CHUNK_BYTES];
    __shared__ alignas(8) uint64_t bar;
    if (threadIdx.x != 0) return;               // one elected thread drives the copy engine
    uint32_t bar_addr = (uint32_t)__cvta_generic_to_shared(&bar);
    uint32_t stage_addr = (uint32_t)__cvta_generic_to_shared(stage);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    uint32_t phase = 0;
    int64_t nchunks = (nbytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        int64_t off = c * CHUNK_BYTES;
        uint32_t bytes = (uint32_t)min((int64_t)CHUNK_BYTES, nbytes - off);   // multiple of 16
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_addr), "r"(bytes) : "memory");
        // peer (rank 0) global -> local shared, through the TMA unit
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(stage_addr), "l"(root_buf + off), "r"(bytes), "r"(bar_addr) : "memory");
        mbar_wait(bar_addr, phase);
        phase ^= 1;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(dst + off), "r"(stage_addr), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");   // stage is free again
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

void tma_pull(int64_t root_ptr, torch::Tensor dst) {
    TORCH_CHECK(dst.is_cuda() && dst.is_contiguous(), "dst must be contiguous CUDA");
    int64_t nbytes = dst.numel() * dst.element_size();
    TORCH_CHECK(nbytes % 16 == 0, "padded size must be a multiple of 16 bytes");
    TORCH_CHECK(root_ptr % 16 == 0 && reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0,
                "bulk copies need 16-byte aligned addresses");
    int64_t nchunks = (nbytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    int blocks = (int)std::min<int64_t>(nchunks, 264);
    tma_pull_kernel<<<blocks, 32, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint8_t*>(root_ptr), reinterpret_cast<uint8_t*>(dst.data_ptr()), nbytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = None
_bufs = {}


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="pkb_bcast_tma", cpp_sources="void tma_pull(int64_t root_ptr, torch::Tensor dst);",
                           cuda_sources=CUDA_SRC, functions=["tma_pull"], with_cuda=True,
                           extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"])
    return _ext


def _padded(numel, elem):
    per16 = max(1, 16 // elem)
    return (numel + per16 - 1) // per16 * per16


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Return rank 0's `tensor` on every rank."""
    ext = _get_ext()
    n = tensor.numel()
    npad = _padded(n, tensor.element_size())
    key = (npad, tensor.dtype)
    if key not in _bufs:
        buf = symm_mem.empty(npad, device=tensor.device, dtype=tensor.dtype)
        _bufs[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _bufs[key]
    if hdl.rank == 0:
        buf[:n].copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)                       # root's data is published
    out = torch.empty(npad, device=tensor.device, dtype=tensor.dtype)
    if hdl.rank == 0:
        out[:n].copy_(buf[:n])
    else:
        ext.tma_pull(hdl.buffer_ptrs[0], out)
    hdl.barrier(channel=0)                       # root may overwrite its buffer next call
    return out[:n].view(tensor.shape)
