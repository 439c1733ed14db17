"""PKB004 on buffers that the next call reuses only behind something that waits for the peers:
a barrier before the buffer's first rewrite, found through helpers and state dicts; a pool of
two buffers handed out in turn by a helper; a per-tile flag barrier inside a persistent kernel.
Each with the same file made unsafe, which must still be flagged."""

from __future__ import annotations

import ast
import textwrap

from analyzer.buffer_roots import BufferRoots
from tests.static_helpers import analyze

PULL = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void fill(float* dst, const float* src, int64_t n) {
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = 2.0f * src[i];
}
__global__ void gather(const int64_t* ptrs, float* out, int64_t n, int world_size) {
    for (int p = 0; p < world_size; ++p) {
        const float* src = reinterpret_cast<const float*>(ptrs[p]);
        for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[p * n + i] = src[i];
    }
}
void scale(int64_t dst, torch::Tensor src, int64_t n) {
    fill<<<(n + 255) / 256, 256>>>(reinterpret_cast<float*>(dst), src.data_ptr<float>(), n);
}
void pull(int64_t ptr, torch::Tensor out, int64_t n, int64_t world_size) {
    gather<<<1, 256>>>(reinterpret_cast<const int64_t*>(ptr), out.data_ptr<float>(), n, world_size);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["scale", "pull"])
_cache = {}


def _get_symm(key, n, device, group):
    got = _cache.get(key)
    if got is None:
        buf = symm_mem.empty(n, device=device, dtype=torch.float32)
        got = (buf, symm_mem.rendezvous(buf, group))
        _cache[key] = got
    return got


def _resources(n, device, group):
    stage, stage_hdl = _get_symm("stage", n, device, group)
    res = {"stage": stage, "stage_hdl": stage_hdl, "stage_ptrs": torch.tensor(stage_hdl.buffer_ptrs, device=device)}
    return res


def solution(x: torch.Tensor, group=None) -> torch.Tensor:
    group = group or dist.group.WORLD
    ws = dist.get_world_size(group)
    n = x.numel()
    first, first_hdl = _get_symm("first", n, x.device, group)
    res = _resources(n, x.device, group)

    def stage_ptr():
        return int(res["stage"].data_ptr())

    FIRST_WRITE
    first_hdl.barrier(channel=0)
    STAGE_WRITE
    res["stage_hdl"].barrier(channel=1)
    out = torch.empty(ws * n, device=x.device)
    _ext.pull(res["stage_ptrs"].data_ptr(), out, n, ws)
    return out
'''

FIRST = "_ext.scale(int(first.data_ptr()), x, n)"
STAGE = "_ext.scale(stage_ptr(), x, n)"


def _pull(first_write: str, stage_write: str) -> str:
    return PULL.replace("FIRST_WRITE", first_write).replace("STAGE_WRITE", stage_write)


def _line(rec, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(rec.source.splitlines()) if needle in ln)


def test_pkb004_buffer_rewritten_only_behind_the_next_calls_first_barrier_is_safe(tmp_path):
    # The gather reads `stage` after the last barrier. The next call writes `first` before any
    # barrier, but `stage` (reached through a closure over a state dict built by a helper) only
    # after first_hdl.barrier, which every peer passes after finishing its gather.
    rec = analyze(tmp_path, "1_allreduce_cuda.py", _pull(FIRST, STAGE))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == []


def test_pkb004_buffer_rewritten_before_any_barrier_is_flagged(tmp_path):
    # The same buffers, but `stage` is rewritten before the first barrier of the next call.
    rec = analyze(tmp_path, "1_allreduce_cuda.py", _pull(FIRST + "\n    " + STAGE, "pass"))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == [_line(rec, "_ext.pull(")]


def test_buffer_roots_tell_two_calls_of_one_cached_helper_apart():
    tree = ast.parse(textwrap.dedent(_pull(FIRST, STAGE)))
    roots = BufferRoots(tree)
    calls = {}
    for c in ast.walk(tree):
        if isinstance(c, ast.Call):
            calls.setdefault(ast.unparse(c.func), c)  # the first of each
    written_first = roots.roots(calls["_ext.scale"].args[0])
    read = roots.roots(calls["_ext.pull"].args[0])
    stage_hdl = roots.roots(next(c for c in ast.walk(tree) if isinstance(c, ast.Call)
                                 and ast.unparse(c.func) == "res['stage_hdl'].barrier").func.value)
    assert read and written_first and not read & written_first  # stage is not first
    assert read & stage_hdl  # the state dict's handle entry is the stage buffer's handle



def test_buffer_roots_follow_a_table_helper_per_call_to_the_buffer_it_was_given():
    # `_table(hx.buffer_ptrs)` and `_table(hy.buffer_ptrs)`: one helper, two tables, each of its
    # own buffer (not every buffer any call passes), and not a new buffer of the helper's
    src = textwrap.dedent('''
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        def _table(ptrs, device):
            return torch.tensor([int(p) for p in ptrs], device=device)

        def setup(device, group):
            xbuf = symm_mem.empty(16, device=device)
            ybuf = symm_mem.empty(16, device=device)
            hx = symm_mem.rendezvous(xbuf, group)
            hy = symm_mem.rendezvous(ybuf, group)
            return {"x_ptrs": _table(hx.buffer_ptrs, device), "y_ptrs": _table(hy.buffer_ptrs, device), "ybuf": ybuf}

        def use(res):
            read_x(res["x_ptrs"])
            read_y(res["y_ptrs"])
            write(res["ybuf"])
    ''')
    tree = ast.parse(src)
    roots = BufferRoots(tree)
    arg = {ast.unparse(c.func): c.args[0] for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func) in ("read_x", "read_y", "write")}
    x, y, ybuf = roots.roots(arg["read_x"]), roots.roots(arg["read_y"]), roots.roots(arg["write"])
    assert y & ybuf  # the y table is ybuf's addresses
    assert not x & y  # and not xbuf's

POOL = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void push(const float* x, const int64_t* ptrs, int64_t n, int rank, int world_size) {
    for (int p = 0; p < world_size; ++p) {
        float* dst = reinterpret_cast<float*>(ptrs[p]);
        for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[rank * n + i] = x[i];
    }
}
void run(torch::Tensor x, torch::Tensor ptrs, int64_t rank, int64_t world_size) {
    push<<<1, 256>>>(x.data_ptr<float>(), ptrs.data_ptr<int64_t>(), x.numel(), rank, world_size);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_pools = {}


def _next_buffer(n, device, group):
    key = (n, device)
    if key not in _pools:
        pool = []
        for _ in range(2):
            buf = symm_mem.empty(n, device=device, dtype=torch.float32)
            hdl = symm_mem.rendezvous(buf, group)
            ptrs = torch.tensor(hdl.buffer_ptrs, device=device)
            pool.append((buf, hdl, ptrs))
        _pools[key] = {"pool": pool, "idx": 0}
    cache = _pools[key]
    idx = cache["idx"]
    buf, hdl, ptrs = cache["pool"][idx]
    TOGGLE
    return buf, hdl, ptrs


def solution(x: torch.Tensor) -> torch.Tensor:
    group = dist.group.WORLD
    ws = dist.get_world_size(group)
    buf, hdl, ptrs = _next_buffer(ws * x.numel(), x.device, group)
    _ext.run(x, ptrs, dist.get_rank(group), ws)
    hdl.barrier(channel=0)
    return buf.clone()
'''


def test_pkb004_push_into_a_pool_of_two_buffers_handed_out_in_turn_is_safe(tmp_path):
    # The helper flips which buffer the next call gets: a push lands in the other buffer, whose
    # readers finished before this call's barrier.
    rec = analyze(tmp_path, "35_ulysses_all_gather_into_tensor_primitive_cuda.py",
                  POOL.replace("TOGGLE", 'cache["idx"] = (idx + 1) % 2'))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == []


def test_pkb004_push_into_a_pool_that_never_turns_is_flagged(tmp_path):
    rec = analyze(tmp_path, "35_ulysses_all_gather_into_tensor_primitive_cuda.py", POOL.replace("TOGGLE", "pass"))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == [_line(rec, "_ext.run(x, ptrs")]


TILES = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__device__ void tile_barrier(const int64_t* signal_ptrs, int64_t tile, int rank, int world_size) {
    int t = threadIdx.x;
    if (t < world_size) {
        int* remote = reinterpret_cast<int*>(signal_ptrs[t]) + tile * world_size + rank;
        int* local = reinterpret_cast<int*>(signal_ptrs[rank]) + tile * world_size + t;
        int old;
        do {
            asm volatile("atom.global.release.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(remote) : "memory");
        } while (old != 0);
        do {
            asm volatile("atom.global.acquire.sys.cas.b32 %0, [%1], 1, 0;" : "=r"(old) : "l"(local) : "memory");
        } while (old != 1);
    }
    __syncthreads();
}
__global__ void reduce_tiles(const float* x, float* mine, const int64_t* buffer_ptrs, const int64_t* signal_ptrs,
                             float* out, int64_t tiles, int rank, int world_size) {
    WAIT_BEFORE
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t i = tile * blockDim.x + threadIdx.x;
        mine[i] = 2.0f * x[i];
        __syncthreads();
        WAIT_IN_LOOP
        float sum = 0.0f;
        for (int p = 0; p < world_size; ++p) {
            const float* peer = reinterpret_cast<const float*>(buffer_ptrs[p]);
            sum += peer[i];
        }
        out[i] = sum;
    }
}
void run(torch::Tensor x, torch::Tensor mine, torch::Tensor buffer_ptrs, torch::Tensor signal_ptrs, torch::Tensor out,
         int64_t rank, int64_t world_size) {
    int64_t tiles = x.numel() / 256;
    reduce_tiles<<<132, 256>>>(x.data_ptr<float>(), mine.data_ptr<float>(), buffer_ptrs.data_ptr<int64_t>(),
                               signal_ptrs.data_ptr<int64_t>(), out.data_ptr<float>(), tiles, rank, world_size);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device), torch.tensor(hdl.signal_pad_ptrs, device=x.device))
        _cache["st"] = st
    buf, hdl, ptrs, sig = st
    out = torch.empty_like(x)
    _ext.run(x, buf, ptrs, sig, out, dist.get_rank(), dist.get_world_size())
    return out
'''

_WAIT = "tile_barrier(signal_ptrs, tile, rank, world_size);"


def test_pkb004_persistent_kernel_with_a_flag_barrier_per_tile_is_safe(tmp_path):
    # Each round waits for the peers before reading their tile: round i's reads are closed by
    # round i+1's wait, the last round's by the next call's first wait.
    rec = analyze(tmp_path, "76_opensora_conv3d_allreduce_cuda.py",
                  TILES.replace("WAIT_BEFORE", "").replace("WAIT_IN_LOOP", _WAIT))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == []


def test_pkb004_one_wait_before_the_tile_loop_does_not_close_its_reads(tmp_path):
    rec = analyze(tmp_path, "76_opensora_conv3d_allreduce_cuda.py",
                  TILES.replace("WAIT_BEFORE", _WAIT.replace("tile,", "0,")).replace("WAIT_IN_LOOP", ""))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == [_line(rec, "_ext.run(x, buf")]


_ADD_ZERO_BARRIER = """__device__ void tile_barrier(const int64_t* signal_ptrs, int64_t tile, int rank, int world_size) {
    int t = threadIdx.x;
    if (t < world_size) {
        unsigned int* remote = reinterpret_cast<unsigned int*>(signal_ptrs[t]) + tile * world_size + rank;
        unsigned int* local = reinterpret_cast<unsigned int*>(signal_ptrs[rank]) + tile * world_size + t;
        __threadfence_system();
        atomicExch_system(remote, 1u);
        unsigned int seen = 0;
        do {
            seen = atomicAdd_system(local, 0u);
        } while (seen != 1u);
    }
    __syncthreads();
}"""


def test_pkb004_a_flag_polled_by_adding_zero_is_a_wait(tmp_path):
    # GPT-5.5's 13_gemm_allreduce polls its peers' arrival with `atomicAdd_system(addr, 0u)` in a
    # do/while: an atomic that adds nothing reads the flag, so the per-tile barrier waits
    start = TILES.index("__device__ void tile_barrier")
    end = TILES.index("__global__ void reduce_tiles")
    src = TILES[:start] + _ADD_ZERO_BARRIER + "\n" + TILES[end:]
    rec = analyze(tmp_path, "76_opensora_conv3d_allreduce_cuda.py", src.replace("WAIT_BEFORE", "").replace("WAIT_IN_LOOP", _WAIT))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == []
    # an atomic add of one is no read of a flag: nothing waits, so the reads stay unclosed
    counted = src.replace("atomicAdd_system(local, 0u)", "atomicAdd_system(local, 1u)")
    rec = analyze(tmp_path, "76_opensora_conv3d_allreduce_cuda.py", counted.replace("WAIT_BEFORE", "").replace("WAIT_IN_LOOP", _WAIT))
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == [_line(rec, "_ext.run(x, buf")]
