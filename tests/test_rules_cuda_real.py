"""New and corrected CUDA-side rules, each on a small candidate file of our own: one that shows
the bug and one with the correct idiom the rule must not flag."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from pkb.corpus import read_candidate


def analyze(tmp_path: Path, body: str, name: str = "1_allreduce_cuda.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    rec = read_candidate(path, tmp_path)
    StaticAnalyzer(StaticOptions(ptx=False, use_cache=False)).analyze(rec)
    return rec


def lines_of(rec, rule: str) -> list[int]:
    return sorted(f.line for f in rec.findings if f.rule == rule)


def line_of(rec, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(rec.source.splitlines()) if needle in ln)


def candidate(cuda: str, launch: str = "_ext.run(hdl.signal_pad_ptrs_dev, buf, dist.get_rank(), dist.get_world_size())") -> str:
    return f'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
{cuda}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_cache = {{}}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        st = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
        _cache["st"] = st
    buf, hdl = st
    buf.copy_(x)
    {launch}
    return buf.clone()
'''


MISALIGNED = r"""
__device__ void barrier(const uint64_t* signal_pad_ptrs, uint64_t block_id, int rank, int world_size) {
    int t = threadIdx.x;
    if (t >= world_size) return;
    uint64_t remote_base = signal_pad_ptrs[t];
    uint32_t* send_addr = reinterpret_cast<uint32_t*>(remote_base + block_id * (uint64_t)world_size + (uint64_t)rank);
    uint32_t old;
    do {
        asm volatile("atom.global.release.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(send_addr) : "memory");
    } while (old != 0u);
}

__global__ void k(const uint64_t* signal_pad_ptrs, float* buf, int rank, int world_size) {
    barrier(signal_pad_ptrs, blockIdx.x, rank, world_size);
}

void run(int64_t signal_pad_ptrs, torch::Tensor buf, int64_t rank, int64_t world_size) {
    k<<<4, 32>>>(reinterpret_cast<const uint64_t*>(signal_pad_ptrs), buf.data_ptr<float>(), rank, world_size);
}
"""


def test_pkb017_byte_offset_on_an_integer_signal_address(tmp_path):
    rec = analyze(tmp_path, candidate(MISALIGNED))
    assert lines_of(rec, "PKB017") == [line_of(rec, "uint32_t* send_addr = reinterpret_cast<uint32_t*>(remote_base +")]


def test_pkb017_cast_first_or_scaled_offset_is_aligned(tmp_path):
    cast_first = MISALIGNED.replace(
        "reinterpret_cast<uint32_t*>(remote_base + block_id * (uint64_t)world_size + (uint64_t)rank)",
        "reinterpret_cast<uint32_t*>(remote_base) + block_id * (uint64_t)world_size + (uint64_t)rank")
    scaled = MISALIGNED.replace(
        "uint32_t* send_addr = reinterpret_cast<uint32_t*>(remote_base + block_id * (uint64_t)world_size + (uint64_t)rank);",
        "const uint64_t off = (block_id * (uint64_t)world_size + (uint64_t)rank) * sizeof(uint32_t);\n"
        "    uint32_t* send_addr = reinterpret_cast<uint32_t*>(remote_base + off);")
    # a literal width with an integer suffix (`* 4ull`) scales as well
    suffixed = scaled.replace("* sizeof(uint32_t);", "* 4ull;")
    for src in (cast_first, scaled, suffixed):
        assert lines_of(analyze(tmp_path, candidate(src)), "PKB017") == []


# The send and the wait of one barrier share one formula: one finding, at the send.
TWO_BARRIERS = MISALIGNED.replace(
    "    uint32_t old;",
    "    uint32_t* wait_addr = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank] + block_id * (uint64_t)world_size + (uint64_t)t);\n"
    "    uint32_t old;").replace(
    "__global__ void k(",
    "__device__ void exit_barrier(const uint64_t* signal_pad_ptrs, uint64_t block_id, int rank, int world_size) {\n"
    "    uint64_t remote_base = signal_pad_ptrs[threadIdx.x];\n"
    "    uint32_t* exit_addr = reinterpret_cast<uint32_t*>(remote_base + block_id * (uint64_t)world_size + (uint64_t)rank);\n"
    "    atomicAdd(exit_addr, 1u);\n"
    "}\n\n"
    "__global__ void k(").replace(
    "    barrier(signal_pad_ptrs, blockIdx.x, rank, world_size);\n}",
    "    barrier(signal_pad_ptrs, blockIdx.x, rank, world_size);\n"
    "    exit_barrier(signal_pad_ptrs, blockIdx.x, rank, world_size);\n}\n\n"
    "__global__ void copy(const uint64_t* buffer_ptrs, float* out, int peer, int n) {\n"
    "    uint64_t remote_base = buffer_ptrs[peer];\n"
    "    const float* src = reinterpret_cast<const float*>(remote_base + 16);\n"
    "    out[threadIdx.x] = src[threadIdx.x];\n}")


def test_pkb017_one_finding_per_formula_other_barrier_functions_related(tmp_path):
    # the exit barrier repeats the send's formula: one mistake, one finding, the copy a related line
    rec = analyze(tmp_path, candidate(TWO_BARRIERS))
    send = line_of(rec, "uint32_t* send_addr = reinterpret_cast<uint32_t*>(remote_base +")
    exit_ = line_of(rec, "uint32_t* exit_addr = reinterpret_cast<uint32_t*>(remote_base +")
    assert [(f.line, f.related_lines) for f in rec.findings if f.rule == "PKB017"] == [(send, [exit_])]
    # a formula of its own is a finding of its own
    other = TWO_BARRIERS.replace("(remote_base + block_id * (uint64_t)world_size + (uint64_t)rank);\n    atomicAdd",
                                 "(remote_base + (uint64_t)rank);\n    atomicAdd")
    rec = analyze(tmp_path, candidate(other))
    assert lines_of(rec, "PKB017") == sorted([send, line_of(rec, "uint32_t* exit_addr = reinterpret_cast")])


def test_pkb017_not_on_a_barrier_only_a_skipped_branch_calls(tmp_path):
    launch = "if dist.get_world_size() == 1:\n        _ext.run(hdl.signal_pad_ptrs_dev, buf, dist.get_rank(), dist.get_world_size())"
    assert lines_of(analyze(tmp_path, candidate(MISALIGNED, launch)), "PKB017") == []
    assert lines_of(analyze(tmp_path, candidate(MISALIGNED)), "PKB017") != []


RELAXED_ENTRY = r"""
__device__ void barrier(const uint64_t* signal_pad_ptrs, int rank, int world_size) {
    int t = threadIdx.x;
    if (t >= world_size) return;
    uint32_t* send = reinterpret_cast<uint32_t*>(signal_pad_ptrs[t]) + rank;
    uint32_t* wait = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank]) + t;
    atomicAdd(send, 1u);
    while (atomicCAS(wait, 1u, 0u) != 1u) { }
}

__global__ void k(const uint64_t* signal_pad_ptrs, const uint64_t* buffer_ptrs, float* out, int rank, int world_size) {
    ENTRY
    float acc = 0.f;
    for (int p = 0; p < world_size; ++p) acc += reinterpret_cast<const float*>(buffer_ptrs[p])[threadIdx.x];
    out[threadIdx.x] = acc;
    EXIT
}

void run(int64_t signal_pad_ptrs, int64_t buffer_ptrs, torch::Tensor out, int64_t rank, int64_t world_size) {
    k<<<1, 32>>>(reinterpret_cast<const uint64_t*>(signal_pad_ptrs), reinterpret_cast<const uint64_t*>(buffer_ptrs),
                 out.data_ptr<float>(), rank, world_size);
}
"""
RELAXED_LAUNCH = "_ext.run(hdl.signal_pad_ptrs_dev, hdl.buffer_ptrs_dev, buf, dist.get_rank(), dist.get_world_size())"


def test_pkb001_relaxed_barrier_after_the_kernels_work(tmp_path):
    src = RELAXED_ENTRY.replace("ENTRY", "").replace("EXIT", "barrier(signal_pad_ptrs, rank, world_size);")
    assert lines_of(analyze(tmp_path, candidate(src, RELAXED_LAUNCH)), "PKB001") != []


def test_pkb001_not_on_a_kernel_only_a_branch_the_run_skips_launches(tmp_path):
    # the run's inputs are bfloat16: the float32 path (and its relaxed barrier) never runs
    src = RELAXED_ENTRY.replace("ENTRY", "").replace("EXIT", "barrier(signal_pad_ptrs, rank, world_size);")
    launch = "if x.dtype == torch.float32:\n        " + RELAXED_LAUNCH + "\n    else:\n        dist.all_reduce(buf)"
    (tmp_path / "solutions_cuda_bf16_h100_8_m").mkdir()
    rec = analyze(tmp_path, candidate(src, launch), "solutions_cuda_bf16_h100_8_m/1_allreduce_cuda.py")
    assert [c.path for c in rec.facts.python.calls if c.qualname == "ext.run"] == ["fallback"]
    assert lines_of(rec, "PKB001") == []


def test_pkb001_relaxed_entry_barrier_before_any_work_is_torchs_pattern(tmp_path):
    src = RELAXED_ENTRY.replace("ENTRY", "barrier(signal_pad_ptrs, rank, world_size);").replace("EXIT", "")
    assert lines_of(analyze(tmp_path, candidate(src, RELAXED_LAUNCH)), "PKB001") == []


BARRIER_KERNEL = r"""
__device__ void send_signal(uint32_t* addr) {
    uint32_t old;
    do { asm volatile("atom.global.relaxed.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(addr) : "memory"); } while (old != 0u);
}
__device__ void wait_signal(uint32_t* addr) {
    uint32_t old;
    do { asm volatile("atom.global.relaxed.sys.cas.b32 %0, [%1], 1, 0;" : "=r"(old) : "l"(addr) : "memory"); } while (old != 1u);
}

__global__ void barrier_kernel(const uint64_t* signal_pad_ptrs, float* out, int rank, int world_size) {
    int t = threadIdx.x;
    if (t >= world_size) return;
    uint32_t* send_addr = reinterpret_cast<uint32_t*>(signal_pad_ptrs[t]) + rank;
    uint32_t* wait_addr = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank]) + t;
    WORK
    send_signal(send_addr);
    wait_signal(wait_addr);
}

void run(int64_t signal_pad_ptrs, torch::Tensor out, int64_t rank, int64_t world_size) {
    barrier_kernel<<<1, 32>>>(reinterpret_cast<const uint64_t*>(signal_pad_ptrs), out.data_ptr<float>(), rank, world_size);
}
"""


def test_pkb001_relaxed_barrier_in_a_kernel_that_stores_nothing_else_is_not_flagged(tmp_path):
    rec = analyze(tmp_path, candidate(BARRIER_KERNEL.replace("WORK", "")))
    assert "relaxed" in {lab.value for k in rec.kernels for lab in k.labels.get("ordering", [])}
    assert lines_of(rec, "PKB001") == []


def test_pkb001_relaxed_barrier_in_a_kernel_that_also_stores_data_is_flagged(tmp_path):
    src = BARRIER_KERNEL.replace("WORK", "out[t] = 1.0f;")
    assert lines_of(analyze(tmp_path, candidate(src)), "PKB001") != []


PARTIAL_WAIT = r"""
__device__ void wait_flag(const uint32_t* flag, uint32_t epoch) {
    uint32_t v;
    do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    } while (v < epoch);
}

__global__ void gather(const int64_t* peer_ptrs, const uint32_t* flags, float* out, int world_size, int n, uint32_t epoch) {
    if (blockIdx.x == 0 && threadIdx.x < world_size) {
        wait_flag(flags + threadIdx.x, epoch);
    }
    __syncthreads();
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        for (int p = 0; p < world_size; ++p) {
            const float* peer = reinterpret_cast<const float*>(peer_ptrs[p]);
            out[p * n + i] = peer[i];
        }
    }
}

void run(torch::Tensor peer_ptrs, torch::Tensor flags, torch::Tensor out, int64_t world_size, int64_t n, int64_t epoch) {
    int blocks = (n + 255) / 256;
    gather<<<blocks, 256>>>(peer_ptrs.data_ptr<int64_t>(), reinterpret_cast<const uint32_t*>(flags.data_ptr<int>()),
                            out.data_ptr<float>(), world_size, n, epoch);
}
"""
PARTIAL_LAUNCH = "_ext.run(torch.tensor(hdl.buffer_ptrs, device=x.device), _cache['flags'], buf, dist.get_world_size(), x.numel(), 1)"


def test_pkb020_block_zero_waits_and_every_block_reads(tmp_path):
    rec = analyze(tmp_path, candidate(PARTIAL_WAIT, PARTIAL_LAUNCH))
    assert lines_of(rec, "PKB020") == [line_of(rec, "if (blockIdx.x == 0 && threadIdx.x < world_size)")]


def test_pkb020_every_block_waits_or_one_block_grid(tmp_path):
    every_block = PARTIAL_WAIT.replace("if (blockIdx.x == 0 && threadIdx.x < world_size)", "if (threadIdx.x < world_size)")
    one_block = PARTIAL_WAIT.replace("int blocks = (n + 255) / 256;", "int blocks = 1;")
    for src in (every_block, one_block):
        assert lines_of(analyze(tmp_path, candidate(src, PARTIAL_LAUNCH)), "PKB020") == []


VEC_COPY = r"""
__global__ void copy_vec(const char* __restrict__ src, char* __restrict__ dst, int64_t nbytes) {
    int64_t nvec = nbytes >> 4;
    int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int64_t i = tid; i < nvec; i += stride) d4[i] = s4[i];
}

void run(torch::Tensor src, torch::Tensor dst, int64_t nbytes) {
    copy_vec<<<64, 256>>>((const char*)src.data_ptr(), (char*)dst.data_ptr(), nbytes);
}
"""
VEC_LAUNCH = "_ext.run(x, buf, x.numel() * x.element_size())"


def test_pkb006_vector_copy_with_no_tail(tmp_path):
    rec = analyze(tmp_path, candidate(VEC_COPY, VEC_LAUNCH))
    assert line_of(rec, "const uint4* s4 = reinterpret_cast<const uint4*>(src);") in lines_of(rec, "PKB006")


def test_pkb006_tail_copied_in_the_kernel_or_guarded_in_python(tmp_path):
    masked_tail = VEC_COPY.replace(
        "    for (int64_t i = tid; i < nvec; i += stride) d4[i] = s4[i];\n",
        "    for (int64_t i = tid; i < nvec; i += stride) d4[i] = s4[i];\n"
        "    int rem = (int)(nbytes & 15);\n"
        "    if (tid < rem) dst[(nvec << 4) + tid] = src[(nvec << 4) + tid];\n")
    rec = analyze(tmp_path, candidate(masked_tail, VEC_LAUNCH))
    assert lines_of(rec, "PKB006") == []
    guarded = "if (x.numel() * x.element_size()) % 16 == 0:\n        " + VEC_LAUNCH + "\n    else:\n        buf.copy_(x)"
    rec = analyze(tmp_path, candidate(VEC_COPY, guarded))
    assert lines_of(rec, "PKB006") == []


VEC_STRUCT = r"""
struct CopyArgs { const char* src; char* dst; int64_t nbytes; };

__global__ void copy_vec(CopyArgs a) {
    int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
GUARD
        const uint4* s4 = reinterpret_cast<const uint4*>(a.src);
        uint4* d4 = reinterpret_cast<uint4*>(a.dst);
        for (int64_t i = tid; i < a.nbytes / 16; i += stride) d4[i] = s4[i];
    } else {
        for (int64_t i = tid; i < a.nbytes; i += stride) a.dst[i] = a.src[i];
    }
}

void run(torch::Tensor src, torch::Tensor dst, int64_t nbytes) {
    CopyArgs a{(const char*)src.data_ptr(), (char*)dst.data_ptr(), nbytes};
    copy_vec<<<64, 256>>>(a);
}
"""


def test_pkb006_vector_path_taken_only_when_the_count_divides(tmp_path):
    # the count reaches the kernel in a struct: only the test around the vector path tells
    divides = "    bool aligned = ((a.nbytes % 16) == 0) && (((uintptr_t)a.src % 16) == 0);\n    if (aligned) {"
    rec = analyze(tmp_path, candidate(VEC_STRUCT.replace("GUARD", divides), VEC_LAUNCH))
    assert lines_of(rec, "PKB006") == []
    rec = analyze(tmp_path, candidate(VEC_STRUCT.replace("GUARD", "    if ((a.nbytes % 16) == 0) {"), VEC_LAUNCH))
    assert lines_of(rec, "PKB006") == []
    # a test of something else than the count's divisibility keeps the finding: a size, or only
    # the address's alignment
    vector_line = "const uint4* s4 = reinterpret_cast<const uint4*>(a.src);"
    rec = analyze(tmp_path, candidate(VEC_STRUCT.replace("GUARD", "    if (a.nbytes > 4096) {"), VEC_LAUNCH))
    assert line_of(rec, vector_line) in lines_of(rec, "PKB006")
    for guard in ("    if (((uintptr_t)a.src % 16) == 0) {", "    if (((unsigned long)a.src % 16) == 0) {",
                  "    if (tid % 2 == 0) {", "    if ((a.nbytes % 16) == 0 || a.nbytes > 4096) {"):
        rec = analyze(tmp_path, candidate(VEC_STRUCT.replace("GUARD", guard), VEC_LAUNCH))
        assert line_of(rec, vector_line) in lines_of(rec, "PKB006"), guard


PUSH = r"""
__device__ void barrier_all(const uint64_t* signal_pad_ptrs, int rank, int world_size, uint32_t epoch) {
    int t = threadIdx.x;
    if (t < world_size) {
        uint32_t* remote = reinterpret_cast<uint32_t*>(signal_pad_ptrs[t]) + rank;
        uint32_t* local = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank]) + t;
        asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(remote), "r"(epoch) : "memory");
        uint32_t v;
        do {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(local) : "memory");
        } while (v < epoch);
    }
    __syncthreads();
}

__global__ void push(const float* src, const int64_t* out_ptrs, const uint64_t* signal_pad_ptrs,
                     int64_t n, int rank, int world_size, uint32_t epoch) {
    for (int p = 0; p < world_size; ++p) {
        float* dst = reinterpret_cast<float*>(out_ptrs[p]) + rank * n;
        for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
    }
    __threadfence_system();
    BARRIER_AT_END
}

void run(torch::Tensor src, torch::Tensor out_ptrs, torch::Tensor signal_pad_ptrs, int64_t rank, int64_t world_size, int64_t epoch) {
    push<<<1, 256>>>(src.data_ptr<float>(), out_ptrs.data_ptr<int64_t>(),
                     reinterpret_cast<const uint64_t*>(signal_pad_ptrs.data_ptr<int64_t>()),
                     src.numel(), rank, world_size, epoch);
}
"""
PUSH_LAUNCH = ("_cache['epoch'] = _cache.get('epoch', 0) + 1\n"
               "    _ext.run(x, torch.tensor(hdl.buffer_ptrs, device=x.device), torch.tensor(hdl.signal_pad_ptrs, device=x.device), "
               "dist.get_rank(), dist.get_world_size(), _cache['epoch'])")


def test_pkb004_push_into_peers_with_no_ack(tmp_path):
    rec = analyze(tmp_path, candidate(PUSH.replace("BARRIER_AT_END", ""), PUSH_LAUNCH), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")]


def test_pkb004_orders_an_autograd_forward_where_apply_runs_it(tmp_path):
    # forward() is defined above solution() but runs at `Pusher.apply`: its calls come after
    # what solution() does before that line
    from analyzer.rules.base import call_positions

    pusher = (
        "class Pusher(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, hdl):\n"
        "        hdl.barrier(channel=1)\n"
        "        return x\n\n\n")
    src = candidate(PUSH.replace("BARRIER_AT_END", ""), PUSH_LAUNCH + "\n    x = Pusher.apply(x, hdl)")
    src = src.replace("def solution(", pusher + "def solution(", 1)
    rec = analyze(tmp_path, src, "2_allgather_cuda.py")
    position = call_positions(SimpleNamespace(rec=rec))
    barrier, push = line_of(rec, "hdl.barrier(channel=1)"), line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")
    assert barrier < push
    assert position("forward", barrier) > position("solution", push)


def test_pkb004_kernel_ending_in_a_barrier_or_an_entry_barrier_is_safe(tmp_path):
    acked = PUSH.replace("BARRIER_AT_END", "barrier_all(signal_pad_ptrs, rank, world_size, epoch);")
    rec = analyze(tmp_path, candidate(acked, PUSH_LAUNCH), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == []
    entry = PUSH_LAUNCH.replace("_cache['epoch'] = _cache.get('epoch', 0) + 1\n", "_cache['epoch'] = _cache.get('epoch', 0) + 1\n    hdl.barrier(channel=0)\n")
    rec = analyze(tmp_path, candidate(PUSH.replace("BARRIER_AT_END", ""), entry).replace("    buf.copy_(x)\n", ""), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == []


SPLIT_BARRIER = PUSH.replace("BARRIER_AT_END", "") + r"""
__device__ __forceinline__ void store_release(uint32_t* addr, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* addr) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
    return v;
}
__global__ void publish_kernel(const uint64_t* signal_pad_ptrs, int rank, int world_size, uint32_t epoch) {
    int t = threadIdx.x;
    if (t < world_size) store_release(reinterpret_cast<uint32_t*>(signal_pad_ptrs[t]) + rank, epoch);
}
__global__ void wait_kernel(const uint32_t* my_pad, int world_size, uint32_t epoch) {
    int t = threadIdx.x;
    if (t < world_size) {
        uint32_t v;
        do { v = load_acquire(my_pad + t); } while (v < epoch);
    }
}
void publish(torch::Tensor signal_pad_ptrs, int64_t rank, int64_t world_size, int64_t epoch) {
    publish_kernel<<<1, 32>>>(reinterpret_cast<const uint64_t*>(signal_pad_ptrs.data_ptr<int64_t>()), rank, world_size, epoch);
}
void wait_all(torch::Tensor my_pad, int64_t world_size, int64_t epoch) {
    wait_kernel<<<1, 32>>>(reinterpret_cast<const uint32_t*>(my_pad.data_ptr<int32_t>()), world_size, epoch);
}
"""
SPLIT_LAUNCH = (PUSH_LAUNCH + "\n    _ext.publish(torch.tensor(hdl.signal_pad_ptrs, device=x.device), dist.get_rank(), dist.get_world_size(), _cache['epoch'])"
                "\n    WAIT")


def _split(wait: str) -> str:
    src = candidate(SPLIT_BARRIER, SPLIT_LAUNCH.replace("WAIT", wait))
    return src.replace('functions=["run"]', 'functions=["run", "publish", "wait_all"]')


def _returned_push(entry_barrier: bool) -> str:
    """The push closed by a barrier, its receivers reading the result out of their own copy after
    that barrier: solution() returns the symmetric buffer its set-up helper keeps."""
    launch = ("hdl.barrier(channel=0)\n    " if entry_barrier else "") + PUSH_LAUNCH + "\n    hdl.barrier(channel=0)"
    src = candidate(PUSH.replace("BARRIER_AT_END", ""), launch)
    cached = """    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        st = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
        _cache["st"] = st
    buf, hdl = st
    buf.copy_(x)
"""
    helper = """def _resources(x):
    res = _cache.get("st")
    if res is not None:
        return res
    buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    res = (buf, hdl)
    _cache["st"] = res
    return res


def solution(x: torch.Tensor) -> torch.Tensor:
"""
    assert cached in src
    src = src.replace("def solution(x: torch.Tensor) -> torch.Tensor:\n" + cached, helper + "    buf, hdl = _resources(x)\n")
    return src.replace("    return buf.clone()", "    return buf.view_as(x)")


def test_pkb004_push_with_no_barrier_before_it_while_peers_still_read_their_copy(tmp_path):
    rec = analyze(tmp_path, _returned_push(entry_barrier=False), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")]


def test_pkb004_push_behind_an_entry_barrier_is_safe(tmp_path):
    rec = analyze(tmp_path, _returned_push(entry_barrier=True), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == []


def test_pkb004_push_then_a_ready_signal_nobody_waits_for(tmp_path):
    rec = analyze(tmp_path, _split(""), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")]


def test_pkb004_barrier_split_over_a_publish_launch_and_a_wait_launch_is_safe(tmp_path):
    wait = "_ext.wait_all(hdl.get_signal_pad(dist.get_rank()), dist.get_world_size(), _cache['epoch'])"
    rec = analyze(tmp_path, _split(wait), "2_allgather_cuda.py")
    assert "wait_kernel" in rec.source and lines_of(rec, "PKB004") == []


FLAG_CONST = r"""
__global__ void signal_and_wait(const int64_t* signal_ptrs, int rank, int world_size, uint32_t want) {
    int t = threadIdx.x;
    if (t < world_size) {
        uint32_t* remote = reinterpret_cast<uint32_t*>(signal_ptrs[t]) + rank;
        uint32_t* local = reinterpret_cast<uint32_t*>(signal_ptrs[rank]) + t;
        asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(remote), "r"(VALUE) : "memory");
        uint32_t v;
        do {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(local) : "memory");
        } while (v != VALUE);
    }
}

void run(torch::Tensor signal_ptrs, int64_t rank, int64_t world_size, int64_t want) {
    signal_and_wait<<<1, 32>>>(signal_ptrs.data_ptr<int64_t>(), rank, world_size, want);
}
"""
FLAG_LAUNCH = ("_cache['n'] = _cache.get('n', 0) + 1\n"
               "    _ext.run(torch.tensor(hdl.signal_pad_ptrs, device=x.device), dist.get_rank(), dist.get_world_size(), _cache['n'])")


def test_pkb002_constant_flag_never_reset(tmp_path):
    rec = analyze(tmp_path, candidate(FLAG_CONST.replace("VALUE", "1u"), FLAG_LAUNCH))
    assert lines_of(rec, "PKB002") == [line_of(rec, "st.release.sys.global.u32")]


def test_pkb002_flags_zeroed_from_the_host_every_call_before_a_barrier_are_reset(tmp_path):
    launch = ("flags = _cache.setdefault('flags', hdl.get_signal_pad(dist.get_rank()))\n"
              "    flags.zero_()\n    hdl.barrier(channel=0)\n    " + FLAG_LAUNCH)
    rec = analyze(tmp_path, candidate(FLAG_CONST.replace("VALUE", "1u"), launch))
    assert lines_of(rec, "PKB002") == []
    # zeroing some other buffer resets no flag
    other = "out = torch.empty_like(x)\n    out.zero_()\n    " + FLAG_LAUNCH
    rec = analyze(tmp_path, candidate(FLAG_CONST.replace("VALUE", "1u"), other))
    assert lines_of(rec, "PKB002") == [line_of(rec, "st.release.sys.global.u32")]


def test_pkb002_value_advanced_every_call_is_not_flagged(tmp_path):
    rec = analyze(tmp_path, candidate(FLAG_CONST.replace("VALUE", "want"), FLAG_LAUNCH))
    assert lines_of(rec, "PKB002") == []


GROWING = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_CACHE = {}


def _get_buf(rows: int, hidden: int, device):
    entry = _CACHE.get(hidden)
    if entry is not None and entry[2] >= rows:
        return entry
    buf = symm_mem.empty((rows, hidden), device=device, dtype=torch.bfloat16)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    entry = (buf, hdl, rows)
    _CACHE[hidden] = entry
    return entry


def solution(x: torch.Tensor, input_splits: list) -> torch.Tensor:
    n_in = ROWS
    buf, hdl, cap = _get_buf(n_in, x.shape[1], x.device)
    buf[:x.shape[0]].copy_(x)
    hdl.barrier(channel=0)
    return buf[:x.shape[0]].clone()
'''


def test_pkb007_rendezvous_only_where_this_ranks_count_outgrows_the_cache(tmp_path):
    rec = analyze(tmp_path, GROWING.replace("ROWS", "int(sum(input_splits))"), "27_moe_all2all_primitive_cuda.py")
    assert lines_of(rec, "PKB007") == [line_of(rec, "hdl = symm_mem.rendezvous(buf, dist.group.WORLD)")]


def test_pkb007_capacity_from_a_size_every_rank_shares(tmp_path):
    rec = analyze(tmp_path, GROWING.replace("ROWS", "x.shape[0] * dist.get_world_size()"), "27_moe_all2all_primitive_cuda.py")
    assert lines_of(rec, "PKB007") == []


def test_pkb007_capacity_summed_from_all_gathered_sizes_is_every_ranks(tmp_path):
    gathered = ("sizes_t = torch.empty(dist.get_world_size(), dtype=torch.long, device=x.device)\n"
                "    dist.all_gather_into_tensor(sizes_t, torch.tensor([x.shape[0]], device=x.device))\n"
                "    sizes = sizes_t.cpu().tolist()\n"
                "    n_in = int(sum(sizes))")
    rec = analyze(tmp_path, GROWING.replace("n_in = ROWS", gathered), "27_moe_all2all_primitive_cuda.py")
    assert "dist.all_gather_into_tensor(sizes_t" in rec.source and lines_of(rec, "PKB007") == []
    # the same sum over this rank's own split sizes still differs between ranks
    own = gathered.replace("n_in = int(sum(sizes))", "n_in = int(sum(input_splits))")
    rec = analyze(tmp_path, GROWING.replace("n_in = ROWS", own), "27_moe_all2all_primitive_cuda.py")
    assert lines_of(rec, "PKB007") == [line_of(rec, "hdl = symm_mem.rendezvous(buf, dist.group.WORLD)")]


def test_pkb004_points_at_the_data_push_not_at_a_later_flag_only_launch(tmp_path):
    # wait first, signal last: no barrier closes the push, and the finding names the push,
    # not the launch that only stores flags into the peers' pads
    wait = "_ext.wait_all(hdl.get_signal_pad(dist.get_rank()), dist.get_world_size(), _cache['epoch'])"
    src = _split("")
    publish = next(ln for ln in src.splitlines() if "_ext.publish(" in ln)
    # the flags live in the user's symmetric buffer (its buffer_ptrs), as real files often do
    flags_in_buf = publish.replace("torch.tensor(hdl.signal_pad_ptrs", "torch.tensor(hdl.buffer_ptrs")
    src = src.replace(publish + "\n", "    " + wait + "\n" + flags_in_buf + "\n")
    rec = analyze(tmp_path, src, "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")]


TWO_BUFFERS = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void gather(const int64_t* ptrs, float* out, int64_t n, int world_size) {
    for (int p = 0; p < world_size; ++p) {
        const float* src = reinterpret_cast<const float*>(ptrs[p]);
        for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[p * n + i] = src[i];
    }
}
void pull(torch::Tensor ptrs, torch::Tensor out, int64_t n, int64_t world_size) {
    gather<<<1, 256>>>(ptrs.data_ptr<int64_t>(), out.data_ptr<float>(), n, world_size);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["pull"])
_cache = {}


def _resources(group, n, device):
    key = (id(group), n)
    got = _cache.get(key)
    if got is not None:
        return got
    buf = symm_mem.empty(n, device=device, dtype=torch.float32)
    hdl = symm_mem.rendezvous(buf, group)
    got = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=device))
    _cache[key] = got
    return got


def solution(x: torch.Tensor, group=None) -> torch.Tensor:
    group = group or dist.group.WORLD
    ws = dist.get_world_size(group)
    meta, meta_hdl, meta_ptrs = _resources(group, 1, x.device)
    meta.copy_(x[:1])
    meta_hdl.barrier(channel=0)
    sizes = torch.empty(ws, device=x.device)
    _ext.pull(meta_ptrs, sizes, 1, ws)
    data, data_hdl, data_ptrs = _resources(DATA_GROUP, x.numel(), x.device)
    data.copy_(x)
    data_hdl.barrier(channel=0)
    out = torch.empty(ws * x.numel(), device=x.device)
    _ext.pull(data_ptrs, out, x.numel(), ws)
    return out
'''


def test_pkb004_names_the_next_calls_first_write_as_the_related_line(tmp_path):
    # the race's other end: the next call's data.copy_ runs before any barrier
    meta = ("    meta, meta_hdl, meta_ptrs = _resources(group, 1, x.device)\n    meta.copy_(x[:1])\n"
            "    meta_hdl.barrier(channel=0)\n    sizes = torch.empty(ws, device=x.device)\n    _ext.pull(meta_ptrs, sizes, 1, ws)\n")
    assert meta in TWO_BUFFERS
    rec = analyze(tmp_path, TWO_BUFFERS.replace(meta, "").replace("DATA_GROUP", "group"), "2_allgather_cuda.py")
    (f,) = [f for f in rec.findings if f.rule == "PKB004"]
    assert f.line == line_of(rec, "_ext.pull(data_ptrs")
    assert f.related_lines == [line_of(rec, "data.copy_(x)")]
    assert f"writes first at line {f.related_lines[0]} (tensor.copy_)" in f.message


def test_pkb004_data_buffer_rewritten_only_behind_a_barrier_of_its_group_is_safe(tmp_path):
    # `meta` is written before any barrier, but the unclosed gather reads `data`, which the next
    # call rewrites only after meta_hdl.barrier on the same group: every peer finished its gather.
    rec = analyze(tmp_path, TWO_BUFFERS.replace("DATA_GROUP", "group"), "36_ulysses_all_gather_variable_primitive_cuda.py")
    assert lines_of(rec, "PKB004") == []


def test_pkb004_data_buffer_of_another_group_is_not_ordered_by_the_first_barrier(tmp_path):
    # The data buffer lives on another group: meta_hdl's barrier does not wait for its readers.
    src = TWO_BUFFERS.replace("DATA_GROUP", "tp_group").replace("group=None)", "group=None, tp_group=None)")
    rec = analyze(tmp_path, src, "36_ulysses_all_gather_variable_primitive_cuda.py")
    # and the meta gather's only later barrier is the data buffer's, on the other group, while
    # the next call rewrites meta before any barrier of its own group
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.pull(meta_ptrs"), line_of(rec, "_ext.pull(data_ptrs")]


def test_pkb004_a_gather_closed_by_a_barrier_of_its_own_group_is_safe(tmp_path):
    src = TWO_BUFFERS.replace("DATA_GROUP", "tp_group").replace("group=None)", "group=None, tp_group=None)")
    src = src.replace("    _ext.pull(meta_ptrs, sizes, 1, ws)\n", "    _ext.pull(meta_ptrs, sizes, 1, ws)\n    meta_hdl.barrier(channel=1)\n")
    rec = analyze(tmp_path, src, "36_ulysses_all_gather_variable_primitive_cuda.py")
    assert "meta_hdl.barrier(channel=1)" in rec.source
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.pull(data_ptrs")]


CAS_BARRIER = r"""
__device__ void cas_barrier(const uint64_t* signal_pad_ptrs, int rank, int world_size) {
    int t = threadIdx.x;
    if (t < world_size) {
        uint32_t* remote = reinterpret_cast<uint32_t*>(signal_pad_ptrs[t]) + rank;
        uint32_t* local = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank]) + t;
        uint32_t tmp;
        SEND
        RECEIVE
    }
    __syncthreads();
}
"""
CAS_SEND = 'do { asm volatile("atom.global.sys.relaxed.cas.b32 %0, [%1], 0, 1;" : "=r"(tmp) : "l"(remote) : "memory"); } while (tmp != 0u);'
CAS_WAIT = 'do { asm volatile("atom.global.sys.relaxed.cas.b32 %0, [%1], 1, 0;" : "=r"(tmp) : "l"(local) : "memory"); } while (tmp != 1u);'


def test_pkb004_push_closed_by_a_relaxed_cas_barrier_is_safe(tmp_path):
    # torch's own barrier retries a relaxed compare-and-swap until the peer's flag is there: a
    # wait, whatever its memory order (the order is PKB001's business)
    barrier = CAS_BARRIER.replace("SEND", CAS_SEND).replace("RECEIVE", CAS_WAIT)
    cuda = PUSH.replace("__global__ void push", barrier + "\n__global__ void push").replace(
        "BARRIER_AT_END", "cas_barrier(signal_pad_ptrs, rank, world_size);")
    rec = analyze(tmp_path, candidate(cuda, PUSH_LAUNCH), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == []


def test_pkb004_a_one_shot_cas_that_waits_for_nothing_does_not_close_the_push(tmp_path):
    one_shot = 'asm volatile("atom.global.sys.relaxed.cas.b32 %0, [%1], 0, 1;" : "=r"(tmp) : "l"(remote) : "memory");'
    barrier = CAS_BARRIER.replace("SEND", one_shot).replace("RECEIVE", "")
    cuda = PUSH.replace("__global__ void push", barrier + "\n__global__ void push").replace(
        "BARRIER_AT_END", "cas_barrier(signal_pad_ptrs, rank, world_size);")
    rec = analyze(tmp_path, candidate(cuda, PUSH_LAUNCH), "2_allgather_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.run(x, torch.tensor(hdl.buffer_ptrs")]


ONE_BUNDLE = TWO_BUFFERS.replace('''def _resources(group, n, device):
    key = (id(group), n)
    got = _cache.get(key)
    if got is not None:
        return got
    buf = symm_mem.empty(n, device=device, dtype=torch.float32)
    hdl = symm_mem.rendezvous(buf, group)
    got = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=device))
    _cache[key] = got
    return got
''', '''def _all_resources(n, device):
    if "res" in _cache:
        return _cache["res"]
    meta = symm_mem.empty(1, device=device, dtype=torch.float32)
    meta_hdl = symm_mem.rendezvous(meta, dist.group.WORLD)
    meta_ptrs = torch.tensor(meta_hdl.buffer_ptrs, device=device)
    data = symm_mem.empty(n, device=device, dtype=torch.float32)
    data_hdl = symm_mem.rendezvous(data, dist.group.WORLD)
    data_ptrs = torch.tensor(data_hdl.buffer_ptrs, device=device)
    res = (meta, meta_hdl, meta_ptrs, data, data_hdl, data_ptrs)
    _cache["res"] = res
    return res
''').replace("    meta, meta_hdl, meta_ptrs = _resources(group, 1, x.device)\n",
             "    meta, meta_hdl, meta_ptrs, data, data_hdl, data_ptrs = _all_resources(x.numel(), x.device)\n").replace(
    "    data, data_hdl, data_ptrs = _resources(DATA_GROUP, x.numel(), x.device)\n", "")


def test_pkb004_buffers_of_one_set_up_tuple_are_told_apart_by_their_rendezvous(tmp_path):
    # One helper returns both buffers; `data_ptrs` comes from data_hdl, the handle of `data`, which
    # the next call rewrites only after meta_hdl's barrier: the early write goes to `meta` alone.
    rec = analyze(tmp_path, ONE_BUNDLE, "36_ulysses_all_gather_variable_primitive_cuda.py")
    assert "_all_resources(x.numel()" in rec.source and "_resources(DATA_GROUP" not in rec.source
    assert lines_of(rec, "PKB004") == []
    # rewriting `data` before any barrier is the reuse again
    early = ONE_BUNDLE.replace("    meta.copy_(x[:1])\n", "    meta.copy_(x[:1])\n    data.zero_()\n    data.copy_(x)\n", 1)
    rec = analyze(tmp_path, early, "36_ulysses_all_gather_variable_primitive_cuda.py")
    assert lines_of(rec, "PKB004") == [line_of(rec, "_ext.pull(data_ptrs")]


PADDED_TRITON = '''
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def rows_dot(a_ptr, b_ptr, out_ptr, K, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + row * K + k + offs)
        b = tl.load(b_ptr + k + offs)
        acc += a * b
    tl.store(out_ptr + row, tl.sum(acc))


def solution(A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = A.shape
    GUARD
    out = torch.empty(M, device=A.device, dtype=torch.float32)
    rows_dot[(M,)](A, b, out, K, BLOCK_K=64)
    return out
'''


def test_pkb006_triton_loads_without_mask_on_an_unpadded_size(tmp_path):
    rec = analyze(tmp_path, PADDED_TRITON.replace("    GUARD\n", ""), name="13_gemm_allreduce_triton.py")
    assert {line_of(rec, "a = tl.load("), line_of(rec, "b = tl.load(")} <= set(lines_of(rec, "PKB006"))


def test_pkb006_not_where_python_pads_the_size_to_the_block(tmp_path):
    guard = "if K % 64 != 0:\n        pad = 64 - K % 64\n        A, b = F.pad(A, (0, pad)), F.pad(b, (0, pad))\n        K += pad"
    rec = analyze(tmp_path, PADDED_TRITON.replace("GUARD", guard), name="13_gemm_allreduce_triton.py")
    assert lines_of(rec, "PKB006") == []
