"""CUDA-side idioms of real model output, each on a small candidate file of our own.

ThunderKittens / ParallelKittens kernels (headers absent), launches through
`kittens::py::launch_kernel`, cuBLAS on peer pointers, hand-written flags in a symmetric buffer,
and a kernel branch on `multicast_ptr == 0` (a fallback on the run, where multicast exists).
"""

from __future__ import annotations

from static_helpers import analyze, edit


def line_of(rec, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(rec.source.splitlines()) if needle in ln)


def evidence_lines(rec, axis: str, value: str) -> set[int]:
    lab = next(lab for lab in rec.labels.get(axis, []) if lab.value == value)
    return {e.line for e in lab.evidence}


TK_HEAD = '''
import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include "kittens.cuh"
#include "pyutils/torchutils.cuh"
using namespace kittens;
'''

TK_TAIL = '''
"""

_ext = None


def solution(x: torch.Tensor) -> torch.Tensor:
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension("tk_ext", CUDA_SRC)
    out = torch.empty_like(x)
    _ext.tk_run(x, out)
    return out
'''

TK_ALLREDUCE = TK_HEAD + r'''
namespace reduce_ns {
struct config { static constexpr int NUM_THREADS = 256; };
struct globals {
    using parallel_layout = pgl<gl<bf16, -1, -1, -1, -1>, 8, true>;
    parallel_layout tensor;
    const int dev_idx;
};
__device__ inline void kernel(const globals &G) {
    bf16_2 tmp;
    size_t idx = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    multimem<bf16_2>::ld_reduce<reduce_op::ADD>(tmp, reinterpret_cast<bf16_2*>(&G.tensor.mc_ptr[idx]));
    multimem<bf16_2>::st(reinterpret_cast<bf16_2*>(&G.tensor.mc_ptr[idx]), tmp);
}
}  // namespace reduce_ns

namespace bar_ns {
struct config { static constexpr int NUM_THREADS = 1; };
struct globals { barrier_t<8> barrier; const int dev_idx; };
__device__ inline void kernel(const globals &G) {
    barrier_all(G.barrier, {0}, G.dev_idx);
}
}  // namespace bar_ns

void entrypoint(kittens::py::TKParallelTensor &t, kittens::py::TKParallelTensor &b) {
    reduce_ns::globals rg { .tensor = kittens::py::parallel_tensor_to_pgl<typename reduce_ns::globals::parallel_layout>(t), .dev_idx = t.local_rank_ };
    bar_ns::globals bg { .barrier = kittens::py::parallel_tensor_to_pgl<barrier_t<8>>(b), .dev_idx = b.local_rank_ };
    kittens::py::launch_kernel<bar_ns::config, bar_ns::globals, bar_ns::kernel>(bg);
    kittens::py::launch_kernel<reduce_ns::config, reduce_ns::globals, reduce_ns::kernel>(rg);
}

#include <torch/csrc/utils/pybind.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    BIND_TK_PARALLEL_TENSOR(m);
    m.def("tk_run", &entrypoint);
}
''' + TK_TAIL


def test_kittens_multimem_is_nvls_and_barrier_all_is_device_flags(tmp_path):
    rec = analyze(tmp_path, "1_allreduce_parallelkittens.py", TK_ALLREDUCE)
    assert rec.label_values("mechanism") == ["nvls"]
    assert evidence_lines(rec, "mechanism", "nvls") >= {line_of(rec, "multimem<bf16_2>::ld_reduce"), line_of(rec, "multimem<bf16_2>::st")}
    assert rec.label_values("sync") == ["device_flags"]
    assert line_of(rec, "barrier_all(G.barrier") in evidence_lines(rec, "sync", "device_flags")
    assert rec.label_values("ordering") == ["release_acquire"]
    # the library's barrier manages its own flags: not a flag that is never reset
    assert not [f for f in rec.findings if f.rule == "PKB002"]


TK_ALLTOALL = TK_HEAD + r'''
namespace a2a {
struct config { static constexpr int NUM_THREADS = 128; };
struct globals {
    using shared_tile = st_bf<64, 64>;
    using parallel_layout = pgl<gl<bf16, -1, -1, -1, -1, shared_tile>, 8, false>;
    parallel_layout output, input;
    const int dev_idx;
};
template <int AXIS>
__device__ inline void kernel(const globals &G) {
    extern __shared__ int smem[];
    shared_tile &tile = *reinterpret_cast<shared_tile*>(smem);
    __shared__ semaphore arrived;
    tma::load_async(tile, G.input[G.dev_idx], {0, 0, blockIdx.x, 0}, arrived);
    int dst_dev_idx = blockIdx.y;
    tma::store_async(G.output[dst_dev_idx], tile, {0, 0, blockIdx.x, AXIS});
}
}  // namespace a2a

void entrypoint(kittens::py::TKParallelTensor &out, kittens::py::TKParallelTensor &in) {
    a2a::globals g { .output = kittens::py::parallel_tensor_to_pgl<typename a2a::globals::parallel_layout>(out),
                     .input = kittens::py::parallel_tensor_to_pgl<typename a2a::globals::parallel_layout>(in),
                     .dev_idx = in.local_rank_ };
    kittens::py::launch_kernel<a2a::config, a2a::globals, a2a::kernel<1>>(g);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("tk_run", &entrypoint); }
''' + TK_TAIL


def test_kittens_tma_store_to_a_peer_is_tma_and_local_load_is_not_peer_traffic(tmp_path):
    rec = analyze(tmp_path, "8_alltoall_parallelkittens.py", TK_ALLTOALL)
    assert rec.label_values("mechanism") == ["tma"]
    assert evidence_lines(rec, "mechanism", "tma") == {line_of(rec, "tma::store_async(G.output[dst_dev_idx]")}


def test_kittens_binding_lost_by_clang_beside_one_it_kept_is_still_followed(tmp_path):
    # clang keeps the m.def of a plain torch::Tensor entry but drops the one whose function takes
    # TKParallelTensor & (a missing header's type): the dropped binding is the one the run calls
    plain = r'''
__global__ void scale_kernel(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }
void scale_entry(torch::Tensor x) { scale_kernel<<<1, 32>>>(x.data_ptr<float>(), x.numel()); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("scale", &scale_entry);
    m.def("tk_run", &entrypoint);
}'''
    src = TK_ALLTOALL.replace('PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("tk_run", &entrypoint); }', plain)
    src = src.replace("    _ext.tk_run(x, out)\n", "    _ext.scale(x)\n    _ext.tk_run(x, out)\n")
    assert src.count("_ext.scale(x)") == 1
    rec = analyze(tmp_path, "8_alltoall_parallelkittens.py", src)
    assert rec.label_values("mechanism") == ["tma"]


TK_ELEMENTS = TK_HEAD + r'''
namespace gather_ns {
struct config { static constexpr int NUM_THREADS = 256; };
struct globals {
    using layout = pgl<gl<bf16, -1, -1, -1, -1>, 8, false>;
    layout src, dst;
    const int dev_idx;
};
__device__ inline void kernel(const globals &G) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    for (int peer = 0; peer < 8; ++peer) {
        bf16 *peer_ptr = (bf16*)&G.src[peer](0, 0, 0, 0);
        G.dst[G.dev_idx].raw_ptr[peer * 1024 + idx] = peer_ptr[idx];
    }
}
}  // namespace gather_ns

namespace opaque_ns {
struct config { static constexpr int NUM_THREADS = 256; };
struct globals {
    using layout = pgl<gl<bf16, -1, -1, -1, -1>, 8, false>;
    layout buf;
    const int dev_idx;
};
__device__ inline void kernel(const globals &G) {
    some_library_helper(G.buf, G.dev_idx);
}
}  // namespace opaque_ns

void entrypoint(kittens::py::TKParallelTensor &a, kittens::py::TKParallelTensor &b) {
    gather_ns::globals g { .src = kittens::py::parallel_tensor_to_pgl<typename gather_ns::globals::layout>(a),
                           .dst = kittens::py::parallel_tensor_to_pgl<typename gather_ns::globals::layout>(b),
                           .dev_idx = a.local_rank_ };
    kittens::py::launch_kernel<gather_ns::config, gather_ns::globals, gather_ns::kernel>(g);
}

void opaque_entry(kittens::py::TKParallelTensor &a) {
    opaque_ns::globals g { .buf = kittens::py::parallel_tensor_to_pgl<typename opaque_ns::globals::layout>(a), .dev_idx = a.local_rank_ };
    kittens::py::launch_kernel<opaque_ns::config, opaque_ns::globals, opaque_ns::kernel>(g);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("tk_run", &entrypoint);
    m.def("tk_opaque", &opaque_entry);
}
''' + TK_TAIL


def test_kittens_element_access_on_a_peer_copy_is_sm_load(tmp_path):
    rec = analyze(tmp_path, "6_gather_parallelkittens.py", TK_ELEMENTS)
    assert rec.label_values("mechanism") == ["sm_load"]
    assert evidence_lines(rec, "mechanism", "sm_load") == {line_of(rec, "bf16 *peer_ptr = (bf16*)&G.src[peer]")}


def test_kittens_peer_base_offset_then_written_through_is_sm_store(tmp_path):
    # the slot's base is taken, offset, and written through the offset pointer: a push
    src = TK_ELEMENTS.replace(
        "        G.dst[G.dev_idx].raw_ptr[peer * 1024 + idx] = peer_ptr[idx];",
        "        bf16 *slot = peer_ptr + G.dev_idx * 1024;\n        slot[idx] = G.dst[G.dev_idx].raw_ptr[idx];")
    rec = analyze(tmp_path, "6_gather_parallelkittens.py", src)
    assert rec.label_values("mechanism") == ["sm_store"]
    # read through the offset pointer instead: still a load
    src = src.replace("slot[idx] = G.dst[G.dev_idx].raw_ptr[idx];", "G.dst[G.dev_idx].raw_ptr[idx] = slot[idx];")
    assert analyze(tmp_path, "6_gather_parallelkittens.py", src).label_values("mechanism") == ["sm_load"]


def test_kittens_parallel_layout_used_out_of_sight_is_unknown_not_none(tmp_path):
    src = TK_ELEMENTS.replace("_ext.tk_run(x, out)", "_ext.tk_opaque(x)")
    rec = analyze(tmp_path, "6_gather_parallelkittens.py", src)
    assert rec.label_values("mechanism") == ["unknown"]
    note = rec.labels["mechanism"][0].evidence[0].note
    assert "kittens.cuh" in note


CUBLAS_PEER = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cublas_v2.h>
#include <ATen/cuda/CUDABlas.h>

static void gemm(cublasHandle_t h, const at::BFloat16* A, const at::BFloat16* B, float* C, int M, int N, int K) {
    float alpha = 1.0f, beta = 1.0f;
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha,
                 reinterpret_cast<const void*>(B), CUDA_R_16BF, N,
                 reinterpret_cast<const void*>(A), CUDA_R_16BF, K,
                 &beta, reinterpret_cast<void*>(C), CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

void gemm_over_peers(std::vector<int64_t> x_ptrs, torch::Tensor w, torch::Tensor out, int64_t M, int64_t K) {
    cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
    for (size_t r = 0; r < x_ptrs.size(); ++r) {
        const at::BFloat16* x_remote = reinterpret_cast<const at::BFloat16*>(x_ptrs[r]);
        gemm(h, x_remote, w.data_ptr<at::BFloat16>() + r * K, out.data_ptr<float>(), M, out.size(1), K);
    }
}

void gemm_local(torch::Tensor x, torch::Tensor w, torch::Tensor out, int64_t M, int64_t K) {
    cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
    gemm(h, x.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(), out.data_ptr<float>(), M, out.size(1), K);
}
"""

_ext = load_inline("peer_gemm", cpp_sources=CPP, functions=["gemm_over_peers", "gemm_local"])
_cache = {}


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    buf = _cache.get("buf")
    if buf is None:
        buf = symm_mem.empty(x.shape, device=x.device, dtype=x.dtype)
        _cache["buf"] = buf
        _cache["hdl"] = symm_mem.rendezvous(buf, dist.group.WORLD)
    hdl = _cache["hdl"]
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.zeros(x.shape[0], w.shape[1], device=x.device, dtype=torch.float32)
    _ext.gemm_over_peers([int(p) for p in hdl.buffer_ptrs], w, out, x.shape[0], x.shape[1])
    hdl.barrier(channel=0)
    return out
'''


def test_cublas_fed_a_peer_pointer_reads_peer_memory(tmp_path):
    rec = analyze(tmp_path, "15_combined_sharded_gemms_cuda.py", CUBLAS_PEER)
    assert "sm_load" in rec.label_values("mechanism")
    assert line_of(rec, "cublasGemmEx(h,") in evidence_lines(rec, "mechanism", "sm_load")
    # the GEMM that reads the peer's operand both moves and computes
    assert "fused_kernel" in rec.label_values("overlap")


def test_cublas_on_local_tensors_is_not_peer_traffic(tmp_path):
    peers_fn = CUBLAS_PEER[CUBLAS_PEER.index("void gemm_over_peers"):CUBLAS_PEER.index("void gemm_local")]
    src = (CUBLAS_PEER.replace(peers_fn, "")
           .replace('functions=["gemm_over_peers", "gemm_local"]', 'functions=["gemm_local"]')
           .replace("_ext.gemm_over_peers([int(p) for p in hdl.buffer_ptrs], w, out,", "_ext.gemm_local(buf, w, out,"))
    rec = analyze(tmp_path, "15_combined_sharded_gemms_cuda.py", src)
    assert "sm_load" not in rec.label_values("mechanism")
    assert "fused_kernel" not in rec.label_values("overlap")


SYMM_FLAGS = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__device__ void signal_peer(uint32_t* addr) {
    asm volatile("atom.global.release.sys.exch.b32 _, [%0], 1;" :: "l"(addr) : "memory");
}

__global__ void gather_kernel(const int64_t* data_ptrs, const int64_t* sync_ptrs, float* out, int rank, int world, int n) {
    if (threadIdx.x < world) {
        uint32_t* remote_flag = reinterpret_cast<uint32_t*>(sync_ptrs[threadIdx.x]) + rank;
        signal_peer(remote_flag);
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < world; ++p) {
        const float* src = reinterpret_cast<const float*>(data_ptrs[p]);
        if (i < n) out[p * n + i] = src[i];
    }
}

void gather(torch::Tensor data_ptrs, torch::Tensor sync_ptrs, torch::Tensor out, int64_t rank, int64_t world, int64_t n) {
    gather_kernel<<<(n + 255) / 256, 256>>>(data_ptrs.data_ptr<int64_t>(), sync_ptrs.data_ptr<int64_t>(),
                                           out.data_ptr<float>(), rank, world, n);
}
"""

_ext = load_inline("flags_ext", cpp_sources="", cuda_sources=CUDA, functions=["gather"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        sync = symm_mem.empty(64, device=x.device, dtype=torch.int32)
        sync_hdl = symm_mem.rendezvous(sync, dist.group.WORLD)
        ptrs = torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64)
        sync_ptrs = torch.tensor(sync_hdl.buffer_ptrs, device=x.device, dtype=torch.int64)
        st = (buf, hdl, ptrs, sync_ptrs)
        _cache["st"] = st
    buf, hdl, ptrs, sync_ptrs = st
    buf.copy_(x)
    out = torch.empty(dist.get_world_size() * x.numel(), device=x.device, dtype=x.dtype)
    _ext.gather(ptrs, sync_ptrs, out, dist.get_rank(), dist.get_world_size(), x.numel())
    return out
'''


def test_release_atomic_in_a_users_symmetric_buffer_is_a_flag_not_sm_atomic(tmp_path):
    rec = analyze(tmp_path, "2_allgather_cuda.py", SYMM_FLAGS)
    assert "sm_atomic" not in rec.label_values("mechanism")
    assert rec.label_values("mechanism") == ["sm_load"]
    assert "device_flags" in rec.label_values("sync")
    assert line_of(rec, "atom.global.release.sys.exch.b32") in evidence_lines(rec, "sync", "device_flags")


def test_relaxed_atomic_reduction_into_a_peer_is_still_sm_atomic(tmp_path):
    src = SYMM_FLAGS.replace("atom.global.release.sys.exch.b32 _, [%0], 1;", "red.global.add.f32 [%0], 1.0;")
    src = src.replace("uint32_t* remote_flag = reinterpret_cast<uint32_t*>(sync_ptrs", "uint32_t* remote_acc = reinterpret_cast<uint32_t*>(data_ptrs")
    src = src.replace("signal_peer(remote_flag);", "signal_peer(remote_acc);")
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert "sm_atomic" in rec.label_values("mechanism")


def test_device_scope_atomic_raising_a_peer_flag_is_a_flag_not_sm_atomic(tmp_path):
    """`atomicExch(&peer_flags[i], 1)` (device scope, no release) still raises a flag: no payload moves."""
    src = SYMM_FLAGS.replace("        signal_peer(remote_flag);", "        atomicExch(remote_flag, 1u);")
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert rec.label_values("mechanism") == ["sm_load"]
    assert line_of(rec, "atomicExch(remote_flag, 1u);") in evidence_lines(rec, "sync", "device_flags")


def test_device_scope_atomic_adding_into_a_peer_buffer_is_sm_atomic(tmp_path):
    src = SYMM_FLAGS.replace("        signal_peer(remote_flag);", "        atomicAdd(reinterpret_cast<float*>(data_ptrs[threadIdx.x]) + rank, 1.0f);")
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert "sm_atomic" in rec.label_values("mechanism")


MC_BRANCH = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void push_multimem(const uint4* src, uint64_t mc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint4 v = src[i];
        asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "l"(reinterpret_cast<uint4*>(mc) + i), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    }
}

__global__ void push_p2p(const uint4* src, const uint64_t* peers, int world, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        for (int p = 0; p < world; ++p) reinterpret_cast<uint4*>(peers[p])[i] = src[i];
    }
}

void push(torch::Tensor src, int64_t multicast_ptr, torch::Tensor peer_ptrs, int64_t n) {
    const uint4* s = reinterpret_cast<const uint4*>(src.data_ptr());
    bool use_multimem = (multicast_ptr != 0) && (n % 8 == 0);
    if (use_multimem) {
        push_multimem<<<(n + 255) / 256, 256>>>(s, (uint64_t)multicast_ptr, n);
    } else {
        push_p2p<<<(n + 255) / 256, 256>>>(s, reinterpret_cast<const uint64_t*>(peer_ptrs.data_ptr<int64_t>()),
                                          peer_ptrs.size(0), n);
    }
}
"""

_ext = load_inline("mc_ext", cpp_sources="", cuda_sources=CUDA, functions=["push"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64))
        _cache["st"] = st
    buf, hdl, ptrs = st
    hdl.barrier(channel=0)
    _ext.push(x, hdl.multicast_ptr, ptrs, x.numel() // 8)
    hdl.barrier(channel=0)
    return buf.clone()
'''


def test_kernel_launched_only_when_multicast_is_missing_is_a_fallback(tmp_path):
    rec = analyze(tmp_path, "3_broadcast_cuda.py", MC_BRANCH)
    assert rec.label_values("mechanism") == ["nvls"]
    assert rec.label_values("fallback") == ["sm_store"]
    assert all(e.note.startswith("fallback") for e in rec.labels["fallback"][0].evidence)


def test_a_branch_that_also_tests_something_else_is_not_decided(tmp_path):
    # `|| force_p2p`: the peer-store kernel may run on the run too
    src = MC_BRANCH.replace("bool use_multimem = (multicast_ptr != 0) && (n % 8 == 0);",
                            "bool use_multimem = (multicast_ptr != 0) || (n < 1024);")
    rec = analyze(tmp_path, "3_broadcast_cuda.py", src)
    assert set(rec.label_values("mechanism")) == {"nvls", "sm_store"}


def test_an_early_return_on_the_multicast_path_leaves_the_rest_of_the_block_a_fallback(tmp_path):
    # `if (use_multimem) { ...; return; }` and the peer-store path after it, with no else
    src = MC_BRANCH.replace("""    } else {
        push_p2p<<<""", """        return;
    }
    {
        push_p2p<<<""")
    assert "return;" in src and "} else {" not in src
    rec = analyze(tmp_path, "3_broadcast_cuda.py", src)
    assert rec.label_values("mechanism") == ["nvls"]
    assert rec.label_values("fallback") == ["sm_store"]
    # an early return on a test the run does not decide keeps both paths
    undecided = src.replace("(multicast_ptr != 0) && (n % 8 == 0)", "(multicast_ptr != 0) || (n < 1024)")
    assert set(analyze(tmp_path, "3_broadcast_cuda.py", undecided).label_values("mechanism")) == {"nvls", "sm_store"}


def test_kittens_kernel_taking_a_templated_globals(tmp_path):
    src = (TK_ALLTOALL.replace("struct globals {", "template <int D> struct globals {")
           .replace("__device__ inline void kernel(const globals &G)", "__device__ inline void kernel(const globals<64> &G)"))
    rec = analyze(tmp_path, "8_alltoall_parallelkittens.py", src)
    assert rec.label_values("mechanism") == ["tma"]


CUDART_COPY = r'''
import ctypes
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_cache = {}


def _copy(dst: torch.Tensor, src_ptr: int, nbytes: int):
    cudart = torch.cuda.cudart()
    cudart.cudaMemcpyAsync(ctypes.c_void_p(dst.data_ptr()), ctypes.c_void_p(src_ptr), ctypes.c_size_t(nbytes),
                           ctypes.c_int(3), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        st = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
        _cache["st"] = st
    buf, hdl = st
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty((hdl.world_size, x.numel()), device=x.device, dtype=x.dtype)
    for p in range(hdl.world_size):
        _copy(out[p], SOURCE, x.numel() * x.element_size())
    hdl.barrier(channel=0)
    return out
'''


def test_cudart_memcpy_from_a_peer_address_passed_to_a_helper_is_copy_engine(tmp_path):
    src = CUDART_COPY.replace("SOURCE", "int(hdl.buffer_ptrs[p])").replace(
        "cudart = torch.cuda.cudart()", 'cudart = ctypes.CDLL("libcudart.so")')
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert rec.label_values("mechanism") == ["copy_engine"]
    assert line_of(rec, "cudart.cudaMemcpyAsync(") in evidence_lines(rec, "mechanism", "copy_engine")


def test_torch_cudart_binds_no_copy_so_its_memcpy_moves_nothing(tmp_path):
    # torch.cuda.cudart() binds error strings, the profiler, host register, streams and memory
    # info only: cudaMemcpyAsync through it raises AttributeError on every call
    rec = analyze(tmp_path, "2_allgather_cuda.py", CUDART_COPY.replace("SOURCE", "int(hdl.buffer_ptrs[p])"))
    assert "copy_engine" not in rec.label_values("mechanism")


def test_cudart_memcpy_between_local_buffers_is_no_transfer(tmp_path):
    rec = analyze(tmp_path, "2_allgather_cuda.py", CUDART_COPY.replace("SOURCE", "x.data_ptr()"))
    assert "copy_engine" not in rec.label_values("mechanism")


OWN_FLAG = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
__global__ void wait_kernel(volatile int32_t* flag) {
    while (*flag == 0) { }
    __threadfence_system();
    *flag = 0;
}
void wait_flag(torch::Tensor flag) { wait_kernel<<<1, 1>>>(FLAG_ARG); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("wait_flag", &wait_flag); }
"""
_ext = compile_cuda_extension("own_flag", CUDA_SRC)
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        flag = symm_mem.empty((1,), dtype=torch.int32, device=x.device)
        st = (flag, symm_mem.rendezvous(flag, dist.group.WORLD))
        _cache["st"] = st
    flag, hdl = st
    _ext.wait_flag(flag)
    return x.clone()
'''


def test_a_spin_on_this_ranks_symmetric_flag_is_device_flags(tmp_path):
    rec = analyze(tmp_path, "57_ring_attention_pp_cuda.py", OWN_FLAG.replace("FLAG_ARG", "flag.data_ptr<int32_t>()"))
    assert "device_flags" in rec.label_values("sync")
    assert line_of(rec, "while (*flag == 0)") in evidence_lines(rec, "sync", "device_flags")


ALIGNED_BRANCH = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void push_wide(const uint4* x, uint64_t mc, int64_t n, int64_t off) {
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint4 v = x[i];
        uint64_t addr = mc + (off + i) * 16;
        asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "l"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    }
}
__global__ void push_narrow(const __nv_bfloat16* x, const int64_t* ptrs, int64_t n, int rank, int world) {
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        for (int p = 0; p < world; ++p) {
            __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(ptrs[p]);
            dst[rank * n + i] = x[i];
        }
    }
}
void push(torch::Tensor x, uint64_t mc, torch::Tensor ptrs, int64_t rank, int64_t world, int64_t bytes) {
    bool wide = (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0) && (bytes % 16 == 0);
    if (wide) {
        push_wide<<<(bytes / 16 + 255) / 256, 256>>>((const uint4*)x.data_ptr(), mc, bytes / 16, rank * bytes / 16);
    } else {
        push_narrow<<<(bytes / 2 + 255) / 256, 256>>>((const __nv_bfloat16*)x.data_ptr(), ptrs.data_ptr<int64_t>(),
                                                     bytes / 2, rank, world);
    }
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["push"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel() * 8, device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device))
        _cache["st"] = st
    buf, hdl, ptrs = st
    hdl.barrier(channel=0)
    _ext.push(x, hdl.multicast_ptr, ptrs, dist.get_rank(), 8, x.numel() * x.element_size())
    hdl.barrier(channel=0)
    return buf.clone()
'''


def test_a_branch_on_the_inputs_address_alignment_takes_the_aligned_arm_on_the_run(tmp_path):
    # `reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0`: torch's allocations are aligned, so
    # the narrow peer-store arm is a fallback, not the candidate's mechanism
    rec = analyze(tmp_path, "34_ulysses_all_gather_into_tensor_primitive_cuda.py", ALIGNED_BRANCH)
    assert rec.label_values("mechanism") == ["nvls"]
    assert "sm_store" in {lab.value for lab in rec.labels.get("fallback", [])}


TABLE_CAST = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void push(const float* x, const void* const* dst_ptrs, int64_t n, int rank) {
    int dst = blockIdx.y;
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float* dst_ptr = reinterpret_cast<float*>(const_cast<void*>(dst_ptrs[dst]));
        dst_ptr[rank * n + i] = x[i];
    }
}
void run(torch::Tensor x, torch::Tensor table, int64_t rank, int64_t world) {
    const void* const* dst_ptrs = reinterpret_cast<const void* const*>(table.data_ptr<int64_t>());
    dim3 grid((x.numel() + 255) / 256, world);
    push<<<grid, 256>>>(x.data_ptr<float>(), dst_ptrs, x.numel(), rank);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_pool = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    if "bufs" not in _pool:
        bufs, tables = [], []
        for _ in range(2):
            buf = symm_mem.empty(x.numel() * 8, device=x.device, dtype=x.dtype)
            hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
            bufs.append((buf, hdl))
            tables.append(torch.tensor(hdl.buffer_ptrs, device=x.device))
        _pool["bufs"], _pool["tables"], _pool["i"] = bufs, tables, 0
    i = _pool["i"]
    _pool["i"] = (i + 1) % 2
    buf, hdl = _pool["bufs"][i]
    table = _pool["tables"][i]
    hdl.barrier(channel=0)
    _ext.run(x, table, dist.get_rank(), 8)
    hdl.barrier(channel=0)
    return buf.clone()
'''


def test_an_address_cast_to_a_pointer_to_pointers_is_a_table_of_peer_addresses(tmp_path):
    # whatever the Python side made of `tables[i]`, `reinterpret_cast<const void* const*>` of it
    # is an array of addresses: indexing reads the local table, the store through the element
    # writes a peer (push)
    rec = analyze(tmp_path, "33_ulysses_all_to_all_tensor_primitive_cuda.py", TABLE_CAST)
    assert rec.label_values("mechanism") == ["sm_store"]


SOURCE_RANK = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void pull(const int32_t* src_ranks, const int64_t* ptrs, float* dst, int64_t seg_len, int64_t total) {
    int64_t idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    int64_t seg = idx / seg_len;
    RANK_DECL
    const float* src = reinterpret_cast<const float*>(ptrs[rank]);
    dst[idx] = src[idx % seg_len];
}
void run(torch::Tensor src_ranks, torch::Tensor ptrs, torch::Tensor dst, int64_t seg_len) {
    pull<<<(dst.numel() + 255) / 256, 256>>>(src_ranks.data_ptr<int32_t>(), ptrs.data_ptr<int64_t>(),
                                             dst.data_ptr<float>(), seg_len, dst.numel());
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_cache = {}


def solution(x: torch.Tensor, src_ranks: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device))
        _cache["st"] = st
    buf, hdl, ptrs = st
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty(8 * x.numel(), device=x.device, dtype=x.dtype)
    _ext.run(src_ranks, ptrs, out, x.numel())
    hdl.barrier(channel=1)
    return out
'''


def test_a_local_named_rank_read_from_a_table_is_the_source_rank_not_ours(tmp_path):
    # `int rank = src_ranks[seg];` picks the peer each element comes from: `ptrs[rank]` is a peer
    rec = analyze(tmp_path, "70_torchrec_kjt_all2all_cuda.py", SOURCE_RANK.replace("RANK_DECL", "int32_t rank = src_ranks[seg];"))
    assert rec.label_values("mechanism") == ["sm_load"]
    # this rank's own slot stays local
    own = SOURCE_RANK.replace("RANK_DECL", "").replace("int64_t seg_len, int64_t total)", "int64_t seg_len, int64_t total, int rank)")
    own = own.replace("seg_len, dst.numel());", "seg_len, dst.numel(), 0);")
    assert analyze(tmp_path, "70_torchrec_kjt_all2all_cuda.py", own).label_values("mechanism") == ["none"]


def test_a_multicast_test_at_the_very_end_of_a_source_is_no_crash():
    from analyzer.cuda_branches import fallback_spans

    assert fallback_spans("void f() {}\n// fallback below if (mc_ptr)\n") == []
    assert fallback_spans("void f(long mc_ptr) { if (mc_ptr)") == []


TEMPLATE_PTR_STRUCT = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

template <int MAX_RANKS>
struct PtrArray {
    const uint16_t* ptrs[MAX_RANKS];
};

template <int MAX_RANKS>
__global__ void gather_kernel(PtrArray<MAX_RANKS> remote, int64_t n, uint16_t* out, int my_rank) {
    int peer = blockIdx.y;
    if (peer == my_rank) return;
    const uint16_t* src = remote.ptrs[peer];
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[peer * n + i] = src[i];
    }
}

void gather(std::vector<int64_t> remote_ptr_ints, int64_t n, torch::Tensor out, int my_rank) {
    PtrArray<32> table;
    for (size_t i = 0; i < remote_ptr_ints.size(); ++i) {
        table.ptrs[i] = reinterpret_cast<const uint16_t*>(remote_ptr_ints[i]);
    }
    dim3 grid(64, remote_ptr_ints.size());
    gather_kernel<32><<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        table, n, reinterpret_cast<uint16_t*>(out.data_ptr()), my_rank);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gather", &gather); }
"""

_ext = None


def solution(x):
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension("gather_ext", CUDA_SRC)
    world, rank = dist.get_world_size(), dist.get_rank()
    buf = symm_mem.empty(x.numel(), dtype=x.dtype, device=x.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    buf.copy_(x.flatten())
    hdl.barrier(channel=0)
    out = torch.empty(world * x.numel(), dtype=x.dtype, device=x.device)
    _ext.gather([int(p) for p in hdl.buffer_ptrs], x.numel(), out, rank)
    hdl.barrier(channel=1)
    return out
'''


def test_peer_pointers_in_a_struct_read_by_a_template_kernel_are_sm_load(tmp_path):
    # `remote.ptrs[peer]` in a kernel templated on the struct's size: libclang names no field for
    # the dependent member, so the field the host filled with peer addresses is looked up by name
    rec = analyze(tmp_path, "4_all_gather_cuda.py", TEMPLATE_PTR_STRUCT)
    assert rec.label_values("mechanism") == ["sm_load"]
    assert evidence_lines(rec, "mechanism", "sm_load") == {line_of(rec, "out[peer * n + i] = src[i];")}


def test_a_fallback_kernel_moving_data_as_the_run_does_adds_no_fallback_mechanism(tmp_path):
    # the run's kernel stores into a peer as well: the skipped kernel's peer store is the run's
    # own mechanism, not a second one (`fallback` lists only what the skipped branches add)
    src = edit(MC_BRANCH, "__global__ void push_multimem(const uint4* src, uint64_t mc, int n) {",
                "__global__ void push_multimem(const uint4* src, uint64_t mc, const uint64_t* peers, int n) {")
    src = edit(src, "        uint4 v = src[i];\n", "        uint4 v = src[i];\n        reinterpret_cast<uint4*>(peers[0])[i] = v;\n")
    src = edit(src, "push_multimem<<<(n + 255) / 256, 256>>>(s, (uint64_t)multicast_ptr, n);",
                "push_multimem<<<(n + 255) / 256, 256>>>(s, (uint64_t)multicast_ptr,\n"
                "            reinterpret_cast<const uint64_t*>(peer_ptrs.data_ptr<int64_t>()), n);")
    rec = analyze(tmp_path, "3_broadcast_cuda.py", src)
    assert sorted(rec.label_values("mechanism")) == ["nvls", "sm_store"]
    assert rec.label_values("fallback") == []
