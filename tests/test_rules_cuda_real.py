"""New and corrected CUDA-side rules, each on a small candidate file of our own: one that shows
the bug and one with the correct idiom the rule must not flag."""

from __future__ import annotations

import textwrap
from pathlib import Path

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
    for src in (cast_first, scaled):
        assert lines_of(analyze(tmp_path, candidate(src)), "PKB017") == []
