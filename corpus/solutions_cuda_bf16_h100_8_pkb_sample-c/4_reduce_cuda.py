"""
Reduce to rank dst with a hand-written flag barrier in the signal pad.

Every rank copies its input into a symmetric buffer and raises a flag in each peer's signal pad;
the destination waits for all flags and sums every peer's buffer. Two defects: each flag slot is
an integer address plus a byte offset (misaligned for most ranks), and only block 0 waits for
the flags while every block reads the peers' buffers.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__device__ void send_flag(uint32_t* slot, uint32_t epoch) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(slot), "r"(epoch) : "memory");
}

__device__ void wait_flag(uint32_t* slot, uint32_t epoch) {
    uint32_t v;
    do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(slot) : "memory");
    } while (v < epoch);
}

__global__ void reduce_kernel(const uint64_t* __restrict__ ptrs, const uint64_t* __restrict__ signal_pad_ptrs,
                              float* __restrict__ out, int64_t n, int rank, int world_size, int dst,
                              uint32_t epoch) {
    int t = threadIdx.x;
    if (blockIdx.x == 0 && t < world_size) {
        uint64_t remote = signal_pad_ptrs[t];
        uint64_t local = signal_pad_ptrs[rank];
        uint32_t* send_slot = reinterpret_cast<uint32_t*>(remote + (uint64_t)rank);
        uint32_t* wait_slot = reinterpret_cast<uint32_t*>(local + (uint64_t)t);
        send_flag(send_slot, epoch);
        if (rank == dst) wait_flag(wait_slot, epoch);
    }
    __syncthreads();
    if (rank != dst) return;
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = 0.f;
        for (int r = 0; r < world_size; ++r) {
            const float* src = reinterpret_cast<const float*>(ptrs[r]);
            acc += src[i];
        }
        out[i] = acc;
    }
}

void reduce_to(int64_t ptrs_dev, int64_t signal_pad_ptrs_dev, torch::Tensor out, int64_t rank,
               int64_t world_size, int64_t dst, int64_t epoch) {
    const int64_t n = out.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 264);
    auto stream = c10::cuda::getCurrentCUDAStream();
    reduce_kernel<<<blocks, threads, 0, stream>>>(
        reinterpret_cast<const uint64_t*>(ptrs_dev), reinterpret_cast<const uint64_t*>(signal_pad_ptrs_dev),
        out.data_ptr<float>(), n, (int)rank, (int)world_size, (int)dst, (uint32_t)epoch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = load_inline(
    name="sample_c_reduce_flags",
    cpp_sources="void reduce_to(int64_t ptrs_dev, int64_t signal_pad_ptrs_dev, torch::Tensor out, int64_t rank, int64_t world_size, int64_t dst, int64_t epoch);",
    cuda_sources=CUDA_SRC,
    functions=["reduce_to"],
)
_state = {}


def solution(tensor: torch.Tensor, dst: int = 0) -> torch.Tensor:
    key = (tensor.numel(), tensor.device)
    if key not in _state:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        out = torch.empty(tensor.numel(), device=tensor.device, dtype=torch.float32)
        _state[key] = {"buf": buf, "hdl": hdl, "out": out, "epoch": 0}
    st = _state[key]
    buf, hdl = st["buf"], st["hdl"]
    st["epoch"] += 1
    buf.copy_(tensor.reshape(-1).float())
    _ext.reduce_to(hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, st["out"], hdl.rank, hdl.world_size, dst, st["epoch"])
    return st["out"].view_as(tensor).to(tensor.dtype)
