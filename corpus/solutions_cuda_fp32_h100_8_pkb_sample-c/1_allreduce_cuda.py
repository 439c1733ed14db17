"""
One-shot push all-reduce with release/acquire flags.

Every block pushes its slice of the input into every peer's receive buffer, then publishes a
per-(source, block) flag in the peer's signal pad with st.release.sys. The receiving block waits
with ld.acquire.sys until all sources have published this call's epoch, then sums the slices.

Receive buffers are double-buffered by epoch parity: a peer can be at most one call ahead
(it cannot finish call k+1 without our flags of call k+1), so it never writes into the slot we
are still reading. Flags carry a monotonically increasing epoch and are never reset.
The spin is bounded: after ~2^31 polls the kernel traps instead of hanging the job.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#define NBLK 32
#define FLAG_BASE 64

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// recv layout on every rank: [2 slots][world][n] floats
__global__ void oneshot_push_allreduce(const float* __restrict__ in, const uint64_t* __restrict__ recv_ptrs,
                                       const uint64_t* __restrict__ pad_ptrs, float* __restrict__ out,
                                       int64_t n, int rank, int world, uint32_t epoch) {
    const int64_t slot_off = (int64_t)(epoch & 1u) * world * n;
    const int64_t per = (n + NBLK - 1) / NBLK;
    const int64_t lo = blockIdx.x * per, hi = min(n, lo + per);
    for (int p = 0; p < world; ++p) {
        float* dst = reinterpret_cast<float*>(recv_ptrs[p]) + slot_off + (int64_t)rank * n;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = in[i];   // push
    }
    __syncthreads();
    if (threadIdx.x < world) {
        uint32_t* peer_pad = reinterpret_cast<uint32_t*>(pad_ptrs[threadIdx.x]);
        st_release_sys(peer_pad + FLAG_BASE + rank * NBLK + blockIdx.x, epoch);
        const uint32_t* mine = reinterpret_cast<const uint32_t*>(pad_ptrs[rank]) + FLAG_BASE +
                               threadIdx.x * NBLK + blockIdx.x;
        uint64_t polls = 0;
        while (ld_acquire_sys(mine) < epoch) {
            if (++polls > (1ull << 31)) {
                printf("allreduce: rank %d block %d timed out waiting for rank %d\n", rank, blockIdx.x,
                       threadIdx.x);
                __trap();
            }
        }
    }
    __syncthreads();
    const float* recv = reinterpret_cast<const float*>(recv_ptrs[rank]) + slot_off;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) s += recv[(int64_t)p * n + i];
        out[i] = s;
    }
}

void allreduce(torch::Tensor in, torch::Tensor out, int64_t recv_ptrs, int64_t pad_ptrs, int64_t rank,
               int64_t world, int64_t epoch) {
    TORCH_CHECK(in.scalar_type() == at::kFloat && in.is_contiguous(), "contiguous fp32 expected");
    TORCH_CHECK(world <= 32, "at most 32 ranks (one flag thread per rank)");
    oneshot_push_allreduce<<<NBLK, 512, 0, c10::cuda::getCurrentCUDAStream()>>>(
        in.data_ptr<float>(), reinterpret_cast<const uint64_t*>(recv_ptrs),
        reinterpret_cast<const uint64_t*>(pad_ptrs), out.data_ptr<float>(), in.numel(), (int)rank,
        (int)world, (uint32_t)epoch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = None
_state = {}


def _get(tensor):
    global _ext
    if _ext is None:
        _ext = load_inline(name="pkb_oneshot_push_ra",
                           cpp_sources="void allreduce(torch::Tensor in, torch::Tensor out, int64_t recv_ptrs, "
                                       "int64_t pad_ptrs, int64_t rank, int64_t world, int64_t epoch);",
                           cuda_sources=CUDA_SRC, functions=["allreduce"], with_cuda=True,
                           extra_cuda_cflags=["-O3"])
    n = tensor.numel()
    if n not in _state:
        world = dist.get_world_size()
        recv = symm_mem.empty(2 * world * n, device=tensor.device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(recv, dist.group.WORLD)
        _state[n] = {"recv": recv, "hdl": hdl, "epoch": 0}
    return _state[n]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    st = _get(tensor)
    hdl = st["hdl"]
    st["epoch"] += 1
    src = tensor.contiguous().view(-1).float()
    out = torch.empty_like(src)
    _ext.allreduce(src, out, hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, hdl.rank, hdl.world_size,
                   st["epoch"])
    return out.view_as(tensor).to(tensor.dtype)
