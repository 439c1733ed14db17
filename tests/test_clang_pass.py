"""Tests of the libclang pass (analyzer/clang_pass.py).

Sources are built by hand with a line_map offset of OFFSET, so every assertion on a line also
checks the CUDA-text -> Python-file mapping.
"""

from __future__ import annotations

import pytest

from analyzer import clang_ast
from analyzer.clang_pass import analyze_cuda
from pkb.facts import CudaSource

OFFSET = 10


def make_src(text: str) -> CudaSource:
    n = text.count("\n") + 1
    return CudaSource(index=0, origin="load_inline.cuda_sources", text=text,
                      line_map=[i + 1 + OFFSET for i in range(n)])


def file_line(text: str, needle: str, nth: int = 0) -> int:
    """File line of the nth text line containing `needle`."""
    hits = [i for i, ln in enumerate(text.split("\n")) if needle in ln]
    return hits[nth] + 1 + OFFSET


def func(facts, name):
    return next(f for f in facts.functions if f.name == name)


def param(facts, fname, pname):
    return next(p for p in func(facts, fname).params if p.name == pname)


def accesses(facts, function, kind=None):
    return [a for a in facts.accesses if a.function == function and (kind is None or a.kind == kind)]


PULL = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void copy_kernel(const float* __restrict__ src, float* __restrict__ dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

void pull_from_peer(int64_t src_ptr, torch::Tensor out) {
    const float* src = reinterpret_cast<const float*>(src_ptr);
    float* dst = out.data_ptr<float>();
    int n = out.numel();
    copy_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(src, dst, n);
}

void copy_local(torch::Tensor in, torch::Tensor out) {
    copy_kernel<<<1, 256>>>(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("pull", &pull_from_peer, "pull");
}
"""


def test_peer_load_through_seeded_int64_param():
    facts = analyze_cuda(make_src(PULL), "cand.py", {"pull": ["peer_ptr", "local"]})
    assert facts.status == "ok", facts.message
    assert facts.bindings == {"pull": "pull_from_peer"}
    assert facts.includes == ["torch/extension.h", "cuda_runtime.h"]
    assert facts.missing_headers == []
    host = param(facts, "pull_from_peer", "src_ptr")
    assert (host.pointer_kind, host.basis) == ("peer_ptr", "seed")
    src = param(facts, "copy_kernel", "src")
    assert src.pointer_kind == "peer_ptr" and src.is_pointer and src.basis == "dataflow"
    assert param(facts, "copy_kernel", "dst").pointer_kind == "local"
    loads = [a for a in accesses(facts, "copy_kernel", "load") if a.pointer == "src"]
    assert len(loads) == 1
    assert loads[0].pointer_kind == "peer_ptr"
    assert loads[0].line == file_line(PULL, "dst[i] = src[i]")
    assert loads[0].width_bits == 32
    # dst is local: its store is not reported
    assert not [a for a in facts.accesses if a.pointer == "dst"]
    k = func(facts, "copy_kernel")
    assert k.kind == "global"
    assert k.line == file_line(PULL, "__global__ void copy_kernel")
    assert k.text_line == file_line(PULL, "__global__ void copy_kernel") - OFFSET
    launch = next(l for l in facts.launches if l.caller == "pull_from_peer")
    assert launch.kernel == "copy_kernel"
    assert launch.arg_kinds == ["peer_ptr", "local", "unknown"]
    assert launch.grid == "(n + 255) / 256" and launch.block == "256"
    assert launch.stream == "at::cuda::getCurrentCUDAStream()"
    assert "copy_kernel" in facts.bounds_checked


def test_same_kernel_through_local_pointers_is_not_peer():
    facts = analyze_cuda(make_src(PULL), "cand.py", {"pull": ["local", "local"], "copy_local": ["local", "local"]})
    assert param(facts, "copy_kernel", "src").pointer_kind == "local"
    assert not [a for a in facts.accesses if a.pointer_kind in ("peer_ptr", "peer_ptr_array")]
    local = next(l for l in facts.launches if l.caller == "copy_local")
    assert local.arg_kinds[:2] == ["local", "local"]


TABLE = r"""
__global__ void allreduce_kernel(float** ptrs, float* out, int rank, int world, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = ptrs[rank][i];
    for (int k = 1; k < world; ++k) {
        int peer = (rank + k) % world;
        acc += ptrs[peer][i];
    }
    out[i] = acc;
}

__global__ void push_kernel(float** ptrs, const float* in, int rank, int world, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < world; ++p) {
        float* dst = ptrs[p];
        if (i < n) dst[rank * n + i] = in[i];
    }
    atomicAdd_system(&ptrs[1][0], 1.0f);
    atomicAdd(&ptrs[rank][1], 1.0f);
}

void run(int64_t buffer_ptrs_dev, torch::Tensor out, torch::Tensor in, int rank, int world) {
    float** table = reinterpret_cast<float**>(buffer_ptrs_dev);
    allreduce_kernel<<<1, 128>>>(table, out.data_ptr<float>(), rank, world, (int)out.numel());
    push_kernel<<<1, 128>>>(table, in.data_ptr<float>(), rank, world, (int)in.numel());
}
"""


def test_pointer_table_indexed_by_peer_vs_rank():
    facts = analyze_cuda(make_src(TABLE), "cand.py", {"run": ["peer_ptr_array", "local", "local"]})
    assert facts.status == "ok", facts.message
    assert param(facts, "allreduce_kernel", "ptrs").pointer_kind == "peer_ptr_array"
    loads = accesses(facts, "allreduce_kernel", "load")
    by_line = {a.line: a.pointer_kind for a in loads if a.pointer == "ptrs"}
    assert by_line[file_line(TABLE, "ptrs[rank][i]")] == "symm_local"
    assert by_line[file_line(TABLE, "ptrs[peer][i]")] == "peer_ptr"
    # the pointer table itself is not reported as a peer access
    assert all(a.pointer_kind != "peer_ptr_array" for a in facts.accesses)


def test_push_store_and_system_atomic_on_peer():
    facts = analyze_cuda(make_src(TABLE), "cand.py", {"run": ["peer_ptr_array", "local", "local"]})
    stores = accesses(facts, "push_kernel", "store")
    assert [(a.pointer, a.pointer_kind, a.line) for a in stores] == [
        ("dst", "peer_ptr", file_line(TABLE, "dst[rank * n + i] = in[i]"))]
    atomics = accesses(facts, "push_kernel", "atomic")
    sys_atomic = next(a for a in atomics if a.line == file_line(TABLE, "atomicAdd_system"))
    assert (sys_atomic.pointer_kind, sys_atomic.scope, sys_atomic.via) == ("peer_ptr", "system", "intrinsic")
    own = next(a for a in atomics if a.line == file_line(TABLE, "atomicAdd(&ptrs[rank][1]"))
    assert (own.pointer_kind, own.scope) == ("symm_local", "gpu")


FLAGS = r"""
__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void signal_kernel(unsigned** signal_pads, int rank, int world) {
    int peer = threadIdx.x;
    if (peer >= world) return;
    unsigned* remote = signal_pads[peer] + rank;
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(remote), "r"(1u) : "memory");
    long long start = clock64();
    while (ld_acquire_sys(signal_pads[rank] + peer) == 0) {
        if (clock64() - start > 2000000000LL) __trap();
    }
}

__global__ void volatile_wait(unsigned** signal_pads, int rank) {
    volatile unsigned* f = signal_pads[rank];
    while (*f == 0) { }
    __threadfence_system();
}

void signal(int64_t sig_dev, int rank, int world) {
    signal_kernel<<<1, 32>>>(reinterpret_cast<unsigned**>(sig_dev), rank, world);
    volatile_wait<<<1, 1>>>(reinterpret_cast<unsigned**>(sig_dev), rank);
}
"""


def test_release_store_acquire_spin_with_timeout_and_volatile_spin_without():
    facts = analyze_cuda(make_src(FLAGS), "cand.py", {"signal": ["signal_ptr_array"]})
    assert facts.status == "ok", facts.message
    st = next(a for a in facts.asm if a.function == "signal_kernel")
    assert st.mnemonics == ["st.release.sys.global.u32"]
    assert st.line == file_line(FLAGS, "st.release.sys")
    store = next(a for a in facts.accesses if a.via == "asm" and a.kind == "store")
    assert (store.pointer, store.pointer_kind, store.order, store.scope) == ("remote", "signal_ptr", "release", "system")
    load = next(a for a in facts.accesses if a.via == "asm" and a.kind == "load")
    assert (load.function, load.order, load.scope, load.width_bits) == ("ld_acquire_sys", "acquire", "system", 32)
    assert param(facts, "ld_acquire_sys", "p").pointer_kind == "signal_ptr"  # interprocedural
    spins = {s.function: s for s in facts.spin_loops}
    timed = spins["signal_kernel"]
    assert timed.has_exit is True
    assert (timed.polls, timed.order) == ("signal_ptr", "acquire")
    assert timed.line == file_line(FLAGS, "while (ld_acquire_sys")
    forever = spins["volatile_wait"]
    assert forever.has_exit is False
    assert (forever.polls, forever.order) == ("signal_ptr", "volatile")
    fence = next(f for f in facts.fences if f.function == "volatile_wait")
    assert (fence.kind, fence.scope, fence.line) == ("__threadfence_system", "system", file_line(FLAGS, "__threadfence_system"))


COPY = r"""
#include <cuda_runtime.h>
void copy_engine(torch::Tensor dst, int64_t peer_src, int peer, int me, int64_t bytes, int64_t host_buf) {
    cudaStream_t s = at::cuda::getCurrentCUDAStream();
    cudaMemcpyPeerAsync(dst.data_ptr(), me, reinterpret_cast<void*>(peer_src), peer, bytes, s);
    cudaMemcpyAsync(dst.data_ptr(), (void*)host_buf, bytes, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
}
"""


def test_memcpy_peer_async_and_host_copy():
    facts = analyze_cuda(make_src(COPY), "cand.py", {"copy_engine": ["local", "peer_ptr"]})
    peer = next(m for m in facts.memcpys if m.api == "cudaMemcpyPeerAsync")
    assert peer.peer is True and peer.host is False
    assert peer.line == file_line(COPY, "cudaMemcpyPeerAsync")
    h2d = next(m for m in facts.memcpys if m.api == "cudaMemcpyAsync")
    assert (h2d.kind_arg, h2d.host, h2d.peer) == ("cudaMemcpyHostToDevice", True, False)
    sync = next(a for a in facts.api_calls if a.category == "host_sync")
    assert sync.api == "cudaStreamSynchronize"


COOP = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __launch_bounds__(256) coop_kernel(float* out, float* peer_buf, int n) {
    cg::grid_group grid = cg::this_grid();
    out[0] = peer_buf[0];
    grid.sync();
}
void launch_coop(torch::Tensor out, int64_t peer_addr, int n) {
    float* o = out.data_ptr<float>();
    float* p = reinterpret_cast<float*>(peer_addr);
    void* args[] = {&o, &p, &n};
    cudaLaunchCooperativeKernel((void*)coop_kernel, dim3(132), dim3(256), args, 0, 0);
}
"""


def test_cooperative_launch_and_grid_sync():
    facts = analyze_cuda(make_src(COOP), "cand.py", {"launch_coop": ["local", "peer_ptr"]})
    assert facts.status == "ok", facts.message
    launch = facts.launches[0]
    assert launch.cooperative is True and launch.kernel == "coop_kernel"
    assert launch.arg_kinds == ["local", "peer_ptr", "unknown"]
    cats = {(a.category, a.api) for a in facts.api_calls}
    assert ("grid_sync", "grid.sync") in cats
    assert ("grid_sync", "cudaLaunchCooperativeKernel") in cats
    assert func(facts, "coop_kernel").launch_bounds == "256"
    assert any(a.pointer == "peer_buf" and a.pointer_kind == "peer_ptr" and a.kind == "load" for a in facts.accesses)
    # The kernel handed to the launch API by reference is a call edge of the host function, so
    # reachability from the bound entry point finds it (no <<<>>> anywhere in the source).
    assert "coop_kernel" in func(facts, "launch_coop").calls


NVSHMEM = r"""
#include <nvshmem.h>
#include <nvshmemx.h>
__global__ void nvs_kernel(float* sym, const float* src, size_t bytes, int peer) {
    nvshmemx_putmem_block(sym, src, bytes, peer);
    float* p = (float*)nvshmem_ptr(sym, peer);
    p[threadIdx.x] = 1.0f;
    nvshmem_quiet();
}
void host_side() { nvshmem_barrier_all(); }
"""


def test_nvshmem_put_ptr_and_barrier():
    facts = analyze_cuda(make_src(NVSHMEM), "cand.py")
    assert facts.status == "ok", facts.message
    cats = {(a.api, a.category) for a in facts.api_calls}
    assert ("nvshmemx_putmem_block", "nvshmem") in cats
    assert ("nvshmem_ptr", "nvshmem") in cats
    assert ("nvshmem_quiet", "nvshmem_sync") in cats
    assert ("nvshmem_barrier_all", "nvshmem_sync") in cats
    store = next(a for a in facts.accesses if a.pointer == "p")
    assert (store.kind, store.pointer_kind) == ("store", "nvshmem_ptr")


ASM = r"""
__global__ void nvls_kernel(float* mc_ptr, float* peer_src, unsigned smem_addr, unsigned bytes, unsigned bar) {
    float4 v;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(mc_ptr) : "memory");
    asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(mc_ptr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr), "l"(peer_src), "r"(bytes), "r"(bar) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
void go(int64_t mc, int64_t src) {
    nvls_kernel<<<1, 1>>>(reinterpret_cast<float*>(mc), reinterpret_cast<float*>(src), 0, 0, 0);
}
"""


def test_multimem_and_bulk_copy_asm():
    facts = analyze_cuda(make_src(ASM), "cand.py", {"go": ["multicast_ptr", "peer_ptr"]})
    assert facts.status == "ok", facts.message
    mnems = [m for a in facts.asm for m in a.mnemonics]
    assert mnems == ["multimem.ld_reduce.relaxed.sys.global.add.v4.f32", "multimem.st.relaxed.sys.global.v4.f32",
                     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                     "fence.proxy.async.shared::cta"]
    mm = [a for a in facts.accesses if a.pointer == "mc_ptr"]
    assert [(a.kind, a.pointer_kind, a.width_bits) for a in mm] == [("load", "multicast_ptr", 128),
                                                                    ("store", "multicast_ptr", 128)]
    bulk = next(a for a in facts.accesses if a.pointer == "peer_src")
    assert (bulk.kind, bulk.pointer_kind, bulk.via) == ("load", "peer_ptr", "asm")
    cats = {a.category for a in facts.api_calls}
    assert {"nvls", "tma"} <= cats
    tma = next(a for a in facts.api_calls if a.category == "tma")
    assert tma.line == file_line(ASM, "cp.async.bulk")
    assert any(f.kind == "fence.proxy.async" for f in facts.fences)


MISSING = r"""
#include <cuda_runtime.h>
#include "my_helpers.cuh"
#include "kittens.cuh"

__global__ void helper_kernel(float* peer_buf, float* out, int n) {
    int i = threadIdx.x;
    out[i] = peer_buf[i] * scale_factor(i);
    kittens::warp::sync();
}
"""


def test_missing_header_and_undeclared_identifier_are_partial():
    facts = analyze_cuda(make_src(MISSING), "cand.py")
    assert facts.status == "partial"
    assert facts.missing_headers == ["my_helpers.cuh", "kittens.cuh"]
    assert "scale_factor" in facts.message
    assert "my_helpers.cuh" in facts.message
    assert any(d.line == file_line(MISSING, "scale_factor") and d.severity == "error" for d in facts.diagnostics)
    k = func(facts, "helper_kernel")
    assert k.kind == "global" and "scale_factor" in k.calls
    # name fallback still finds the peer load
    p = param(facts, "helper_kernel", "peer_buf")
    assert (p.pointer_kind, p.basis) == ("peer_ptr", "name")
    assert any(a.pointer == "peer_buf" and a.kind == "load" for a in facts.accesses)


SYNTAX = r"""
__global__ void good_kernel(float* remote_buf, int n) {
    int i = threadIdx.x;
    if (i < n) remote_buf[i] = 0.0f;
}

__global__ void broken_kernel(float* x, int n) {
    int i = threadIdx.x
    x[i] = (n + ;
}
"""


def test_syntax_error_still_gives_partial_results():
    facts = analyze_cuda(make_src(SYNTAX), "cand.py")
    assert facts.status == "partial"
    assert {"good_kernel", "broken_kernel"} <= {f.name for f in facts.functions}
    assert any(d.severity == "error" for d in facts.diagnostics)
    assert any(a.function == "good_kernel" and a.kind == "store" and a.pointer_kind == "peer_ptr"
               for a in facts.accesses)


NAMES = r"""
__global__ void by_name(float** peer_ptrs, unsigned** barrier_flags, float* mc_ptr, float* out, int rank, int n) {
    int i = threadIdx.x;
    out[i] = peer_ptrs[(rank + 1) % 2][i];
    barrier_flags[1][rank] = 1u;
    mc_ptr[i] = out[i];
}
"""


def test_name_fallback_without_seeds():
    facts = analyze_cuda(make_src(NAMES), "cand.py")
    assert facts.status == "ok", facts.message
    kinds = {p.name: (p.pointer_kind, p.basis) for p in func(facts, "by_name").params}
    assert kinds["peer_ptrs"] == ("peer_ptr_array", "name")
    assert kinds["barrier_flags"] == ("signal_ptr_array", "name")
    assert kinds["mc_ptr"] == ("multicast_ptr", "name")
    assert kinds["out"] == ("unknown", "")
    got = {(a.pointer, a.kind, a.pointer_kind) for a in facts.accesses}
    assert ("peer_ptrs", "load", "peer_ptr") in got
    assert ("barrier_flags", "store", "signal_ptr") in got
    assert ("mc_ptr", "store", "multicast_ptr") in got


TILES = r"""
__global__ void vec4_unguarded(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    if (i < n / 4) out4[i] = in4[i];
}

__global__ void vec4_with_tail(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (i < n4) reinterpret_cast<float4*>(out)[i] = reinterpret_cast<const float4*>(in)[i];
    int j = n4 * 4 + i;
    if (j < n) out[j] = in[j];
}

__global__ void scalar_checked(const float* in, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) out[i] = in[i];
}
"""


def test_unguarded_float4_tile_vs_bounds_checked():
    facts = analyze_cuda(make_src(TILES), "cand.py")
    assert facts.status == "ok", facts.message
    assert file_line(TILES, "reinterpret_cast<const float4*>(in);") in facts.unguarded_tiles
    assert file_line(TILES, "if (i < n / 4)") in facts.unguarded_tiles
    tail_lines = range(file_line(TILES, "vec4_with_tail"), file_line(TILES, "scalar_checked"))
    assert not [ln for ln in facts.unguarded_tiles if ln in tail_lines]
    assert {"vec4_with_tail", "scalar_checked"} <= set(facts.bounds_checked)
    vec = next(a for a in facts.accesses if a.function == "vec4_unguarded" and a.kind == "store")
    assert vec.width_bits == 128


VECTOR = r"""
#include <vector>
struct Args { float* bufs[8]; };
__global__ void gather(Args args, float* out, int rank, int world) {
    for (int p = 0; p < world; ++p) out[p] = args.bufs[p][threadIdx.x];
}
__global__ void gather2(const long long* table, float* out, int world) {
    float* src = reinterpret_cast<float*>(table[1]);
    out[0] = src[threadIdx.x];
}
void build(std::vector<int64_t> ptrs, torch::Tensor out, int rank, int world) {
    Args a;
    std::vector<int64_t> copy;
    for (int p = 0; p < world; ++p) {
        a.bufs[p] = reinterpret_cast<float*>(ptrs[p]);
        copy.push_back(ptrs[p]);
    }
    gather<<<1, 32>>>(a, out.data_ptr<float>(), rank, world);
    long long* d_table;
    cudaMalloc(&d_table, 64);
    cudaMemcpy(d_table, copy.data(), 64, cudaMemcpyHostToDevice);
    gather2<<<1, 32>>>(d_table, out.data_ptr<float>(), world);
}
"""


def test_pointer_arrays_through_struct_fields_vectors_and_memcpy():
    facts = analyze_cuda(make_src(VECTOR), "cand.py", {"build": ["peer_ptr_array", "local"]})
    assert facts.status == "ok", facts.message
    assert any(a.function == "gather" and a.pointer == "bufs" and a.pointer_kind == "peer_ptr" for a in facts.accesses)
    assert param(facts, "gather2", "table").pointer_kind == "peer_ptr_array"
    assert any(a.function == "gather2" and a.pointer == "src" and a.pointer_kind == "peer_ptr" for a in facts.accesses)


def test_cupy_kernel_seeded_by_kernel_name_and_atomic_ref():
    text = r"""
extern "C" __global__ void raw(unsigned* flag_addr, float* data, int n) {
    cuda::atomic_ref<unsigned, cuda::thread_scope_system> f(*flag_addr);
    f.store(1u, cuda::memory_order_release);
    while (f.load(cuda::memory_order_acquire) != 2u) { if (n < 0) break; }
}
"""
    facts = analyze_cuda(make_src(text), "cand.py", {"raw": ["signal_ptr", "local", "unknown"]})
    assert param(facts, "raw", "flag_addr").basis == "seed"
    got = [(a.kind, a.pointer_kind, a.scope, a.order) for a in facts.accesses if a.pointer == "flag_addr"]
    assert ("store", "signal_ptr", "system", "release") in got
    assert ("load", "signal_ptr", "system", "acquire") in got
    spin = facts.spin_loops[0]
    assert (spin.polls, spin.order, spin.has_exit) == ("signal_ptr", "acquire", True)


def test_regex_fallback_when_libclang_fails(monkeypatch):
    def boom():
        raise RuntimeError("no libclang here")

    monkeypatch.setattr(clang_ast, "_index", boom)
    facts = analyze_cuda(make_src(FLAGS), "cand.py")
    assert facts.status == "partial"
    assert "regex" in facts.message
    assert {"signal_kernel", "volatile_wait"} <= {f.name for f in facts.functions}
    assert "st.release.sys.global.u32" in [m for a in facts.asm for m in a.mnemonics]
    assert [l.kernel for l in facts.launches] == ["signal_kernel", "volatile_wait"]
    assert any(f.kind == "__threadfence_system" for f in facts.fences)


@pytest.mark.parametrize("text", ["", "}}}{{{", "\x00\x01 garbage <<<>>>", "__global__ void k(float* p) { p[0] = 1; "])
def test_never_raises_on_bad_input(text):
    facts = analyze_cuda(make_src(text), "cand.py")
    assert facts.status in ("ok", "partial")
    assert facts.seconds >= 0


NAMESPACED = """
namespace pull {
__global__ void kernel(const float* src, float* out, int n) { out[threadIdx.x] = src[threadIdx.x]; }
}
namespace barrier {
__global__ void kernel(int* flags) { flags[threadIdx.x] = 1; }
}
void run(const float* src, float* out, int* flags, int n) {
    barrier::kernel<<<1, 32>>>(flags);
    pull::kernel<<<1, 32>>>(src, out, n);
}
"""


def test_namespaced_kernels_launched_by_their_written_names():
    # Two namespaces of one file each define `kernel` (ParallelKittens files do): the launch keeps
    # the qualified name, so the kernel the run reaches is told apart from its namesake.
    facts = analyze_cuda(make_src(NAMESPACED), "cand.py")
    assert [l.kernel for l in facts.launches if l.caller == "run"] == ["barrier::kernel", "pull::kernel"]


SEARCH_AND_POLL = """
__global__ void scan(const long* cum_sizes, int num, long total, volatile int* flag) {
    int idx = 0;
    for (long i = threadIdx.x; i < total; i += blockDim.x) {
        while (idx < num && i >= cum_sizes[idx + 1]) {
            idx++;
        }
    }
    while (flag[0] == 0) { }
}
"""


def test_a_search_over_an_array_is_not_a_spin_loop():
    # the search reads a new element on every test; the poll rereads one address
    text = SEARCH_AND_POLL
    facts = analyze_cuda(make_src(text), "cand.py")
    assert [s.line for s in facts.spin_loops] == [file_line(text, "while (flag[0] == 0)")]


PROBE_AND_POLL = """
__global__ void lookup(const long* keys, long table_size, long key, int* out, volatile int* flag) {
    long slot = key % table_size;
    while (true) {
        if (keys[slot] == key) { out[0] = (int)slot; break; }
        slot = (slot + 1) % table_size;
    }
    while (true) {
        if (flag[0] != 0) break;
    }
}
"""


def test_a_hash_probe_that_breaks_on_a_match_is_not_a_spin_loop():
    # `while (true) { if (keys[slot] == k) break; slot = ...; }` reads a new slot each time
    text = PROBE_AND_POLL
    facts = analyze_cuda(make_src(text), "cand.py")
    assert [s.line for s in facts.spin_loops] == [file_line(text, "while (true) {", nth=1)]
