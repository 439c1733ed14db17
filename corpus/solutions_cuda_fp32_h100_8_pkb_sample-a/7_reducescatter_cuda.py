"""
Reduce-scatter in one cooperative kernel.

Block 0 runs a cross-rank handshake through the signal pads (system-scope release store of the
call's epoch into every peer, acquire loads of the peers' epochs), and a grid-wide barrier
(cooperative groups) releases the other blocks once every rank's input is published. All blocks
then sum this rank's chunk over every peer. A second grid barrier + handshake at the end tells
the peers that we are done reading their buffers.
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cooperative_groups.h>
#include <cuda/atomic>

namespace cg = cooperative_groups;

#define READY_BASE 32
#define DONE_BASE 64
#define SPIN_LIMIT (1ull << 30)

__device__ void rank_handshake(const uint64_t* pads, int base, int rank, int world, uint32_t epoch) {
    if (blockIdx.x != 0 || threadIdx.x >= world) return;
    uint32_t* peer = reinterpret_cast<uint32_t*>(pads[threadIdx.x]) + base + rank;
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> out_flag(*peer);
    out_flag.store(epoch, cuda::memory_order_release);
    uint32_t* mine = reinterpret_cast<uint32_t*>(pads[rank]) + base + threadIdx.x;
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> in_flag(*mine);
    unsigned long long spins = 0;
    while (in_flag.load(cuda::memory_order_acquire) < epoch) {
        if (++spins == SPIN_LIMIT) { printf("rank %d: peer %d never arrived\n", rank, threadIdx.x); __trap(); }
    }
}

__global__ void rs_coop_kernel(const uint64_t* ptrs, const uint64_t* pads, float* out, int64_t chunk,
                               int rank, int world, uint32_t epoch) {
    cg::grid_group grid = cg::this_grid();
    rank_handshake(pads, READY_BASE, rank, world, epoch);
    grid.sync();                                   // every block sees that all inputs are published
    for (int64_t i = grid.thread_rank(); i < chunk; i += grid.size()) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) s += reinterpret_cast<const float*>(ptrs[p])[(int64_t)rank * chunk + i];
        out[i] = s;
    }
    grid.sync();                                   // all our peer reads are done
    rank_handshake(pads, DONE_BASE, rank, world, epoch);
}

void reduce_scatter(int64_t ptrs, int64_t pads, torch::Tensor out, int64_t rank, int64_t world, int64_t epoch) {
    TORCH_CHECK(out.scalar_type() == at::kFloat, "fp32 only");
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rs_coop_kernel, 512, 0);
    int64_t chunk = out.numel();
    int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((int64_t)sms * per_sm, (chunk + 511) / 512));
    const uint64_t* p = reinterpret_cast<const uint64_t*>(ptrs);
    const uint64_t* s = reinterpret_cast<const uint64_t*>(pads);
    float* o = out.data_ptr<float>();
    int r = (int)rank, w = (int)world;
    uint32_t e = (uint32_t)epoch;
    void* args[] = {&p, &s, &o, &chunk, &r, &w, &e};
    cudaError_t err = cudaLaunchCooperativeKernel((void*)rs_coop_kernel, dim3(blocks), dim3(512), args, 0,
                                                  c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "cooperative launch failed: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("reduce_scatter", &reduce_scatter, "cooperative reduce-scatter");
}
"""

_ext = None
_ctx = {}


def solution(tensor: torch.Tensor) -> torch.Tensor:
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension("rs_cooperative_f32", CUDA_SRC)
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _ctx:
        buf = symm_mem.empty(tensor.numel(), device=tensor.device, dtype=torch.float32)
        _ctx[key] = {"buf": buf, "hdl": symm_mem.rendezvous(buf, dist.group.WORLD), "epoch": 0}
    ctx = _ctx[key]
    hdl = ctx["hdl"]
    ctx["epoch"] += 1
    ctx["buf"].copy_(tensor.reshape(-1).float())
    out = torch.empty((tensor.shape[0] // hdl.world_size,) + tuple(tensor.shape[1:]),
                      device=tensor.device, dtype=torch.float32)
    _ext.reduce_scatter(hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, out, hdl.rank, hdl.world_size,
                        ctx["epoch"])
    return out.to(tensor.dtype)
