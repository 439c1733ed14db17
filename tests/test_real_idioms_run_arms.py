"""A conditional expression of CUDA host code whose test PKB's run decides (`use_multimem ?
local : peer`): only the arm the run takes carries its pointer kind. A small candidate of our own."""

from __future__ import annotations

from static_helpers import analyze


RECV = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void copy_kernel(const char* src, char* dst, int64_t n) {
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

void launch_recv(torch::Tensor local, torch::Tensor out, int64_t peer_addr, int64_t n, bool FLAG) {
    const char* src = FLAG ? reinterpret_cast<const char*>(local.data_ptr())
                           : reinterpret_cast<const char*>(peer_addr);
    copy_kernel<<<64, 256>>>(src, reinterpret_cast<char*>(out.data_ptr()), n);
}
"""

_ext = load_inline("recv_ext", cpp_sources="", cuda_sources=CUDA, functions=["launch_recv"])
_cache = {}


def solution(x: torch.Tensor, src: int = 0) -> torch.Tensor:
    if "buf" not in _cache:
        _cache["buf"] = symm_mem.empty(x.shape, device=x.device, dtype=x.dtype)
        _cache["hdl"] = symm_mem.rendezvous(_cache["buf"], dist.group.WORLD)
    buf, hdl = _cache["buf"], _cache["hdl"]
    out = torch.empty_like(x)
    hdl.barrier(channel=0)
    _ext.launch_recv(buf, out, int(hdl.buffer_ptrs[src]), x.numel() * x.element_size(), True)
    hdl.barrier(channel=1)
    return out
'''


def test_the_arm_a_multicast_flag_skips_carries_no_peer_load(tmp_path):
    rec = analyze(tmp_path, "3_broadcast_cuda.py", RECV.replace("FLAG", "use_multimem"))
    assert "sm_load" not in rec.label_values("mechanism")


def test_an_undecided_conditional_keeps_both_arms(tmp_path):
    rec = analyze(tmp_path, "3_broadcast_cuda.py", RECV.replace("FLAG", "from_local"))
    assert "sm_load" in rec.label_values("mechanism")
