"""
Reduce-scatter by remote atomics.

Each rank owns a symmetric accumulator of one chunk. After it is zeroed and a barrier confirms
every accumulator is clean, every rank adds chunk p of its input into rank p's accumulator with
system-scope atomicAdd over NVLink. A second barrier waits for all contributions; the result is
copied out so the accumulator can be zeroed on the next call.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

ATOMIC_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void rs_atomic_kernel(const float* __restrict__ in, const uint64_t* __restrict__ acc_ptrs,
                                 int64_t chunk, int rank, int world) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int s = 0; s < world; ++s) {
        const int p = (rank + s) % world;                 // stagger destinations across ranks
        float* acc = reinterpret_cast<float*>(acc_ptrs[p]);
        const float* src = in + (int64_t)p * chunk;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunk; i += stride) {
            atomicAdd_system(acc + i, src[i]);            // lands in rank p's memory
        }
    }
}

void rs_atomic(torch::Tensor in, int64_t acc_ptrs, int64_t rank, int64_t world) {
    TORCH_CHECK(in.scalar_type() == at::kFloat, "fp32 atomics only");
    TORCH_CHECK(in.is_contiguous(), "input must be contiguous");
    TORCH_CHECK(in.numel() % world == 0, "dim 0 must divide by world size");
    const int64_t chunk = in.numel() / world;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((chunk + threads - 1) / threads, 1056);
    rs_atomic_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        in.data_ptr<float>(), reinterpret_cast<const uint64_t*>(acc_ptrs), chunk, (int)rank, (int)world);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = None
_acc = {}


def _prepare(tensor):
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="rs_remote_atomics",
            cpp_sources="void rs_atomic(torch::Tensor in, int64_t acc_ptrs, int64_t rank, int64_t world);",
            cuda_sources=ATOMIC_SRC,
            functions=["rs_atomic"],
            with_cuda=True,
            extra_cuda_cflags=["-O3", "-arch=sm_90"],
        )
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _acc:
        world = dist.get_world_size()
        out_shape = (tensor.shape[0] // world,) + tuple(tensor.shape[1:])
        acc = symm_mem.empty(out_shape, device=tensor.device, dtype=torch.float32)
        _acc[key] = (acc, symm_mem.rendezvous(acc, dist.group.WORLD))
    return _acc[key]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    acc, hdl = _prepare(tensor)
    acc.zero_()
    hdl.barrier(channel=0)            # all accumulators are zero before anyone adds
    _ext.rs_atomic(tensor.contiguous().float(), hdl.buffer_ptrs_dev, hdl.rank, hdl.world_size)
    hdl.barrier(channel=0)            # all remote adds have landed
    return acc.clone().to(tensor.dtype)
