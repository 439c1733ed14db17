"""A list of address tables (one per buffer of a double-buffered exchange) indexed by the buffer
in use gives a table, not an address; and a parity flipped through a local read from the cache
(`st["next"] = 1 - idx`) is double buffering. Candidates of our own."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.static_helpers import analyze as analyze_file

SCATTER = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void push_kernel(const float* x, const long long* out_ptrs, int n, int rank, int world) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int peer = 0; peer < world; ++peer) {
        float* dst = reinterpret_cast<float*>((uintptr_t)out_ptrs[peer]);
        dst[rank * n + i] = x[i];
    }
}
void push(torch::Tensor x, torch::Tensor out_ptrs, int rank, int world) {
    const long long* ptrs = reinterpret_cast<const long long*>(out_ptrs.data_ptr<int64_t>());
    push_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), ptrs, x.numel(), rank, world);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["push"])
_state = None


def _resources(x, world):
    global _state
    if _state is None:
        outs, hdls, tables = [], [], []
        for _ in range(2):
            out = symm_mem.empty(world * x.numel(), device=x.device, dtype=x.dtype)
            hdl = symm_mem.rendezvous(out, dist.group.WORLD)
            TABLE
            outs.append(out)
            hdls.append(hdl)
        _state = {"outs": outs, "hdls": hdls, "ptrs": tables, "next": 0}
    return _state


def solution(x):
    rank, world = dist.get_rank(), dist.get_world_size()
    state = _resources(x, world)
    idx = state["next"]
    FLIP
    out = state["outs"][idx]
    hdl = state["hdls"][idx]
    ptrs = state["ptrs"][idx]
    _ext.push(x, ptrs, rank, world)
    hdl.barrier(channel=0)
    return out
'''

APPENDED = "tables.append(torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64))"


def analyze(tmp_path: Path, table: str = APPENDED, flip: str = 'state["next"] = 1 - idx'):
    return analyze_file(tmp_path, "7_reducescatter_cuda.py", textwrap.dedent(SCATTER).replace("TABLE", table).replace("FLIP", flip))


def test_a_table_picked_from_a_list_of_tables_is_a_table_so_the_kernel_stores_to_peers(tmp_path):
    rec = analyze(tmp_path)
    push = next(c for c in rec.facts.python.calls if c.qualname == "ext.push")
    assert [a.pointer_kind for a in push.args if a.text == "ptrs"] == ["peer_ptr_array"]
    assert rec.label_values("mechanism") == ["sm_store"]


def test_an_address_picked_from_one_table_is_still_an_address(tmp_path):
    # one table of addresses, not a list of tables: `tables` holds the addresses themselves
    rec = analyze(tmp_path, table="tables.extend(int(p) for p in hdl.buffer_ptrs)",
                  flip='state["next"] = 1 - idx')
    kinds = {a.text: a.pointer_kind for c in rec.facts.python.calls if c.qualname == "ext.push" for a in c.args}
    assert kinds["ptrs"] != "peer_ptr_array"


def test_a_parity_flipped_through_a_local_read_from_the_cache_is_double_buffering(tmp_path):
    flipped = analyze(tmp_path)
    assert "PKB004" not in {f.rule for f in flipped.findings}
    fixed = analyze(tmp_path, flip="pass")  # the same buffer every call: the push races the reader
    assert "PKB004" in {f.rule for f in fixed.findings}


ONE_FLOAT = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__device__ float read_peer(const float* p) { return p[0]; }
__device__ void grid_barrier(unsigned int* flags) { while (atomicAdd(flags, 0) == 0) {} }
__global__ void allreduce_kernel(const long long* ptrs, float* buf, float* out, unsigned int* flags, int world) {
    buf[0] = 1.0f;
    grid_barrier(flags);
    float s = 0.f;
    for (int r = 0; r < world; ++r) s += read_peer(reinterpret_cast<const float*>(ptrs[r]));
    out[0] = s;
}
void finalize(torch::Tensor buf) {}
void allreduce(torch::Tensor ptrs, torch::Tensor buf, torch::Tensor out, torch::Tensor flags, int world) {
    allreduce_kernel<<<1, 1>>>((const long long*)ptrs.data_ptr<int64_t>(), buf.data_ptr<float>(), out.data_ptr<float>(),
                               (unsigned int*)flags.data_ptr<int>(), world);
}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["finalize", "allreduce"])
_cache = None
_flip = {"i": 0}  # a parity kept across calls, for the test that flips one


def _get_symm(device):
    global _cache
    if _cache is not None:
        return _cache
    buf = symm_mem.empty(1, device=device, dtype=torch.float32)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    _cache = (buf, hdl, torch.empty(1, device=device), torch.tensor(hdl.buffer_ptrs, device=device, dtype=torch.int64))
    return _cache


def solution(x):
    symm = _get_symm(x.device)
    buf, hdl, out, ptrs = symm
    _ext.finalize(buf)
    hdl.barrier(channel=0)
    _ext.allreduce(ptrs, buf, out, torch.zeros(1, dtype=torch.int32, device=x.device), dist.get_world_size())
    CLOSE
    return out.clone()
'''


def _one_float(tmp_path: Path, close: str = "pass", unpack: bool = True):
    src = textwrap.dedent(ONE_FLOAT).replace("CLOSE", close)
    if not unpack:
        src = src.replace("    symm = _get_symm(x.device)\n    buf, hdl, out, ptrs = symm\n",
                          "    buf, hdl, out, ptrs = _get_symm(x.device)\n")
    return analyze_file(tmp_path, "1_allreduce_cuda.py", src)


def test_a_helpers_tuple_kept_in_a_name_then_unpacked_keeps_its_pointer_kinds(tmp_path):
    # `symm = _get_symm(dev)` then `buf, hdl, out, ptrs = symm`: ptrs is the peers' address table
    rec = _one_float(tmp_path)
    call = next(c for c in rec.facts.python.calls if c.qualname == "ext.allreduce")
    assert [a.pointer_kind for a in call.args if a.text == "ptrs"] == ["peer_ptr_array"]


def test_a_barrier_inside_the_kernel_before_its_helpers_peer_reads_does_not_close_them(tmp_path):
    # read_peer and grid_barrier sit above the kernel: in the kernel the barrier runs first, so the
    # reads stay open and the next call's finalize rewrites buf under a slow peer
    rec = _one_float(tmp_path, unpack=False)
    assert [f.line for f in rec.findings if f.rule == "PKB004"] == [
        next(i + 1 for i, ln in enumerate(rec.source.splitlines()) if "_ext.allreduce(ptrs" in ln)]
    closed = _one_float(tmp_path, close="hdl.barrier(channel=1)", unpack=False)
    assert "PKB004" not in {f.rule for f in closed.findings}


STATE_DICT = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

_ext = load_inline("ext", cpp_sources="void reduce(std::vector<int64_t> p, torch::Tensor x) {}", functions=["reduce"])
_cache = {}


def _state(x):
    if "st" not in _cache:
        buf = symm_mem.empty(x.numel(), device=x.device)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _cache["st"] = (buf, hdl, [int(p) for p in hdl.buffer_ptrs])
    buf, hdl, ptrs = _cache["st"]
    return {"buf": buf, "hdl": hdl, "peer_ptrs": ptrs}


def solution(x):
    st = _state(x)
    _ext.reduce(st["peer_ptrs"], x)
    return x
'''


def test_a_state_dict_returned_by_a_helper_is_read_back_by_key(tmp_path):
    rec = analyze_file(tmp_path, "1_allreduce_cuda.py", STATE_DICT)
    kinds = {a.text: a.pointer_kind for c in rec.facts.python.calls for a in c.args}
    assert kinds.get("st['peer_ptrs']") == "peer_ptr_array", kinds


def test_a_parity_that_picks_only_the_outputs_leaves_the_symmetric_buffer_single(tmp_path):
    # `_flip["i"] ^= 1` picks which output to return; the buffer the peers read is still one
    rec = _one_float(tmp_path, close="_flip['i'] ^= 1\n    res = [out, out.clone()][_flip['i']]", unpack=False)
    assert "PKB004" in {f.rule for f in rec.findings}
