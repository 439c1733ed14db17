"""
All-to-all with NVSHMEM one-sided puts.

NVSHMEM is bootstrapped once from a unique id that rank 0 creates and broadcasts (set-up only).
Each call copies the input into the symmetric heap, then one CUDA block per destination PE issues
a non-blocking block-wide put of that PE's chunk into slot `mype` of the PE's receive buffer.
nvshmem_quiet() completes the puts and a stream-ordered barrier_all makes them visible everywhere
before the receive buffer is copied out; a second barrier protects it from the next call.

Needs NVSHMEM headers and libraries (-rdc=true, libnvshmem); they are not in every image.
"""
import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <vector>

torch::Tensor get_unique_id() {
    nvshmemx_uniqueid_t id;
    nvshmemx_get_uniqueid(&id);
    auto t = torch::empty({(int64_t)sizeof(id)}, torch::kUInt8);
    memcpy(t.data_ptr(), &id, sizeof(id));
    return t;
}

void init_with_id(torch::Tensor id_bytes, int64_t rank, int64_t world) {
    nvshmemx_uniqueid_t id;
    memcpy(&id, id_bytes.data_ptr(), sizeof(id));
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args((int)rank, (int)world, &id, &attr);
    int rc = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    TORCH_CHECK(rc == 0, "nvshmemx_init_attr failed: ", rc);
}

int64_t sym_alloc(int64_t bytes) {
    void* p = nvshmem_malloc((size_t)bytes);
    TORCH_CHECK(p != nullptr, "nvshmem_malloc failed");
    return reinterpret_cast<int64_t>(p);
}

__global__ void a2a_put_kernel(const char* send, char* recv, size_t chunk_bytes) {
    const int mype = nvshmem_my_pe();
    const int npes = nvshmem_n_pes();
    const int pe = (mype + blockIdx.x) % npes;           // one block per destination
    nvshmemx_putmem_nbi_block(recv + (size_t)mype * chunk_bytes, send + (size_t)pe * chunk_bytes,
                              chunk_bytes, pe);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

void alltoall(torch::Tensor src, int64_t send_sym, int64_t recv_sym, torch::Tensor out) {
    auto stream = c10::cuda::getCurrentCUDAStream();
    const size_t bytes = (size_t)src.numel() * src.element_size();
    const int npes = nvshmem_n_pes();
    cudaMemcpyAsync(reinterpret_cast<void*>(send_sym), src.data_ptr(), bytes, cudaMemcpyDeviceToDevice, stream);
    a2a_put_kernel<<<npes, 512, 0, stream>>>(reinterpret_cast<const char*>(send_sym),
                                             reinterpret_cast<char*>(recv_sym), bytes / npes);
    nvshmemx_barrier_all_on_stream(stream);               // every PE's puts have landed
    cudaMemcpyAsync(out.data_ptr(), reinterpret_cast<void*>(recv_sym), bytes, cudaMemcpyDeviceToDevice, stream);
    nvshmemx_barrier_all_on_stream(stream);               // recv is free for the next call
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("get_unique_id", &get_unique_id);
    m.def("init_with_id", &init_with_id);
    m.def("sym_alloc", &sym_alloc);
    m.def("alltoall", &alltoall);
}
"""

_ext = None
_heap = {}


def _init(tensor):
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension("a2a_nvshmem_put", CUDA_SRC)
        rank, world = dist.get_rank(), dist.get_world_size()
        uid = _ext.get_unique_id() if rank == 0 else torch.empty(128, dtype=torch.uint8)
        uid_dev = uid.to(tensor.device)
        dist.broadcast(uid_dev, src=0)                     # one-time bootstrap, not on the timed path
        _ext.init_with_id(uid_dev.cpu(), rank, world)
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes not in _heap:
        _heap[nbytes] = (_ext.sym_alloc(nbytes), _ext.sym_alloc(nbytes))
    return _heap[nbytes]


def solution(tensor: torch.Tensor) -> torch.Tensor:
    send_sym, recv_sym = _init(tensor)
    out = torch.empty_like(tensor)
    _ext.alltoall(tensor.contiguous(), send_sym, recv_sym, out)
    return out
