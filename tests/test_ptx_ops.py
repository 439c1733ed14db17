"""Tests of analyzer/ptx_ops.py: what a PTX instruction means, for inline asm and nvcc's output alike.

Each meaning has a positive and a negative case; the last tests run the clang pass and the
classifier on a small candidate of our own, so the labels are seen to follow the decoder.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from analyzer import ptx_ops
from analyzer.pipeline import StaticAnalyzer, StaticOptions
from pkb.corpus import read_candidate


@pytest.mark.parametrize("opcode, memop, order, scope, width", [
    ("ld.acquire.sys.global.u32", "load", "acquire", "system", 32),
    ("st.release.gpu.global.v4.f32", "store", "release", "gpu", 128),
    ("atom.acq_rel.sys.global.cas.b64", "atomic", "acq_rel", "system", 64),
    ("red.relaxed.cta.global.add.u32", "atomic", "relaxed", "cta", 32),
    ("ld.volatile.global.u32", "load", "volatile", "", 32),
    ("multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2", "load", "relaxed", "system", 128),
    ("multimem.st.global.v8.bf16x2", "store", "", "", 256),
    ("membar.gl", "", "", "gpu", 0),  # membar's .gl is GPU scope
    ("fence.sc.sys", "", "seq_cst", "system", 0),
    ("mov.u32", "", "", "", 32),
])
def test_decode_memop_order_scope_width(opcode, memop, order, scope, width):
    op = ptx_ops.decode(opcode)
    assert (op.memop, op.order, op.scope, op.width_bits) == (memop, order, scope, width)


@pytest.mark.parametrize("opcode, expected", [
    ("st.release.sys.global.u32", True),
    ("ld.acquire.sys.global.u32", True),
    ("atom.acquire.sys.global.cas.b32", True),
    ("multimem.red.release.sys.global.add.u32", True),  # the NVLS barrier's arrive
    ("ld.acquire.gpu.global.u32", False),  # GPU scope does not order against peers
    ("st.relaxed.sys.global.u32", False),
    ("ld.acquire.sys.shared.u32", False),  # no peer sees shared memory
    ("fence.acq_rel.sys", False),  # a fence: fence_system, not release_acquire
])
def test_release_acquire_is_an_ordered_system_scope_access(opcode, expected):
    assert ptx_ops.decode(opcode).orders_system is expected


@pytest.mark.parametrize("opcode, expected", [
    ("fence.sc.sys", True),
    ("fence.acq_rel.sys", True),
    ("membar.sys", True),
    ("fence.acq_rel.gpu", False),
    ("membar.gl", False),
    ("fence.proxy.tensormap::generic.release.sys", False),  # orders proxies, not threads
    ("st.release.sys.global.u32", False),
])
def test_fence_system(opcode, expected):
    assert ptx_ops.decode(opcode).fences_system is expected


def test_engines_and_fence_kind():
    assert ptx_ops.decode("multimem.st.global.f32").engine == "nvls"
    assert ptx_ops.decode("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group").engine == "tma"
    assert ptx_ops.decode("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32").engine == "tma"
    assert ptx_ops.decode("cp.async.ca.shared.global").engine == ""  # an SM copy, no engine
    assert ptx_ops.decode("ld.global.v4.f32").engine == ""
    assert ptx_ops.decode("fence.proxy.async.shared::cta").fence_kind == "fence.proxy.async"
    assert ptx_ops.decode("fence.sc.sys").fence_kind == "fence.sc.sys"


def test_notable_keeps_what_the_taxonomy_reads_and_drops_plain_traffic():
    keep = ["atom.global.add.u32", "ld.acquire.sys.global.u32", "st.global.v4.f32", "ld.global.nc.v4.f32",
            "mbarrier.try_wait.parity.shared::cta.b64", "cp.async.bulk.global.shared::cta.bulk_group", "membar.sys"]
    drop = ["ld.global.f32", "st.shared.u32", "ld.shared.v4.f32", "add.f32", "mov.b64"]
    assert all(ptx_ops.decode(m).notable() for m in keep)
    assert not any(ptx_ops.decode(m).notable() for m in drop)


def test_features_of_the_instruction_summary():
    assert ptx_ops.decode("multimem.red.release.sys.global.add.u32").features() == ["nvls", "release_acquire"]
    assert ptx_ops.decode("atom.sys.global.add.u32").features() == ["atomic_sys"]
    assert ptx_ops.decode("st.volatile.global.u32").features() == ["volatile"]
    assert ptx_ops.decode("st.volatile.shared.u32").features() == []
    assert set(ptx_ops.decode("fence.sc.sys").features()) == {"fence_system"}


def test_asm_parts_names_operands_and_memory_targets():
    asm = ptx_ops.asm_parts('"{\\n .reg .pred p;\\n @p st.release.sys.global.u32 [%[flag]], %1;\\n}" '
                            ':: [flag] "l"(remote + rank), "r"(epoch) : "memory"')
    assert asm.mnemonics == ["st.release.sys.global.u32"]
    assert [o[0] for o in asm.operands] == ["flag", ""]
    (kind, ref), = ptx_ops.memory_targets(*asm.instructions[0])
    assert kind == "store" and asm.operands[asm.operand_index(ref)][2] == "remote + rank"


def test_bulk_copy_targets_its_global_side():
    # to global: the destination (first operand) is written; from global: the source is read
    assert ptx_ops.memory_targets("cp.async.bulk.global.shared::cta.bulk_group", "[%0], [%1], %2") == [("store", "0")]
    assert ptx_ops.memory_targets("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                                  "[%0], [%1], %2, [%3]") == [("load", "1")]
    assert ptx_ops.memory_targets("add.u32", "%0, %1, %2") == []


FLAG_CANDIDATE = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__device__ void signal_peer(uint32_t* flag) {
    asm volatile("SIGNAL" :: "l"(flag) : "memory");
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


def solution(x: torch.Tensor) -> torch.Tensor:
    buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    sync = symm_mem.empty(64, device=x.device, dtype=torch.int32)
    sync_hdl = symm_mem.rendezvous(sync, dist.group.WORLD)
    ptrs = torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64)
    sync_ptrs = torch.tensor(sync_hdl.buffer_ptrs, device=x.device, dtype=torch.int64)
    buf.copy_(x)
    out = torch.empty(dist.get_world_size() * x.numel(), device=x.device, dtype=x.dtype)
    _ext.gather(ptrs, sync_ptrs, out, dist.get_rank(), dist.get_world_size(), x.numel())
    return out
'''


def ordering_of(tmp_path: Path, signal_asm: str) -> list[str]:
    path = tmp_path / "2_allgather_cuda.py"
    path.write_text(textwrap.dedent(FLAG_CANDIDATE.replace("SIGNAL", signal_asm)))
    rec = read_candidate(path, tmp_path)
    StaticAnalyzer(StaticOptions(ptx=False, use_cache=False)).analyze(rec)
    assert "device_flags" in rec.label_values("sync")
    return rec.label_values("ordering")


def test_inline_asm_release_store_orders_the_flag(tmp_path):
    assert ordering_of(tmp_path, "st.release.sys.global.u32 [%0], 1;") == ["release_acquire"]


def test_inline_asm_acq_rel_fence_is_a_system_fence_not_release_acquire(tmp_path):
    # TAXONOMY.md names fence.acq_rel.sys under fence_system; the flag exchange itself is relaxed
    assert ordering_of(tmp_path, "fence.acq_rel.sys;\\n atom.sys.global.exch.b32 _, [%0], 1;") == ["fence_system"]


def test_inline_asm_proxy_fence_does_not_order_the_flag(tmp_path):
    # a tensormap proxy fence at system scope orders the async proxy, not a peer's view of the flag
    assert ordering_of(tmp_path, "fence.proxy.tensormap::generic.release.sys;\\n atom.sys.global.exch.b32 _, [%0], 1;") == ["relaxed"]
