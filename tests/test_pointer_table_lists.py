"""A list of address tables (one per buffer of a double-buffered exchange) indexed by the buffer
in use gives a table, not an address; and a parity flipped through a local read from the cache
(`st["next"] = 1 - idx`) is double buffering. Candidates of our own."""

from __future__ import annotations

import textwrap
from pathlib import Path

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from pkb.corpus import read_candidate

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
    path = tmp_path / "7_reducescatter_cuda.py"
    path.write_text(textwrap.dedent(SCATTER).replace("TABLE", table).replace("FLIP", flip))
    rec = read_candidate(path, tmp_path)
    StaticAnalyzer(StaticOptions(ptx=False, use_cache=False)).analyze(rec)
    return rec


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
