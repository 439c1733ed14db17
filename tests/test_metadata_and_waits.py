"""Small numbers exchanged for the host are not the payload, and a lock-free update is not a wait:
each on a small candidate of our own, with the counterpart the analysis must still flag."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from analyzer.cuda_waits import _is_cas_update
from tests.static_helpers import analyze as analyze_file


def analyze(tmp_path: Path, body: str):
    return analyze_file(tmp_path, "1_allreduce_cuda.py", body)


def rules(rec) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in rec.findings:
        out.setdefault(f.rule, []).append(f.line)
    return out


def line_of(rec, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(rec.source.splitlines()) if needle in ln)


PYTHON_HEAD = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
{cuda}
"""

_ext = load_inline("ext", cpp_sources="", cuda_sources=CUDA, functions=["run", "stats", "reduce"])
_cache = {{}}


def _state(x):
    if "st" not in _cache:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        _cache["st"] = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64))
    return _cache["st"]
'''

PEER_SUM = r"""
__global__ void sum_kernel(const long long* ptrs, float* out, int n, int world) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.f;
    for (int r = 0; r < world; ++r) s += ((const float*)ptrs[r])[i];
    out[i] = s;
}
void run(torch::Tensor ptrs, torch::Tensor out, int world) {
    sum_kernel<<<(out.numel() + 255) / 256, 256>>>((const long long*)ptrs.data_ptr<int64_t>(), out.data_ptr<float>(), out.numel(), world);
}
"""

SAMPLES = PYTHON_HEAD.format(cuda=PEER_SUM) + '''

def solution(x):
    buf, hdl, ptrs = _state(x)
    world = dist.get_world_size()
    sample = x[:4].contiguous()
    parts = [torch.empty_like(sample) for _ in range(world)]
    dist.all_gather(parts, sample)
    USE
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty_like(x)
    _ext.run(ptrs, out, world)
    hdl.barrier(channel=1)
    return out
'''


def test_a_collective_whose_output_is_only_read_back_as_numbers_is_metadata(tmp_path):
    # the samples of a sample sort, gathered to pick splitters on the host
    rec = analyze(tmp_path, SAMPLES.replace("USE", "splitters = sorted(torch.cat(parts).cpu().tolist())"))
    assert "nccl" not in rec.label_values("mechanism")
    assert "PKB012" not in rules(rec)


def test_a_collective_whose_output_feeds_the_gpu_is_the_payload(tmp_path):
    rec = analyze(tmp_path, SAMPLES.replace("USE", "x = x + torch.cat(parts).sum()"))
    assert "nccl" in rec.label_values("mechanism")
    assert line_of(rec, "dist.all_gather(") in rules(rec).get("PKB012", [])


READ_COUNTS = r"""
void run(torch::Tensor ptrs, torch::Tensor counts_host, int world) {
    const int64_t* p = ptrs.data_ptr<int64_t>();
    int32_t* out = counts_host.data_ptr<int32_t>();
    for (int r = 0; r < world; ++r) {
        const int32_t* remote = reinterpret_cast<const int32_t*>(p[r]);
        cudaMemcpy(&out[r], remote, sizeof(int32_t), cudaMemcpyDeviceToHost);
        cudaMemcpy(&out[world + r], remote + 1, sizeof(int32_t), cudaMemcpyDeviceToHost);
    }
}
"""

COUNTS = PYTHON_HEAD.format(cuda=READ_COUNTS) + '''

def solution(x):
    buf, hdl, ptrs = _state(x)
    world = dist.get_world_size()
    buf.copy_(x)
    hdl.barrier(channel=0)
    counts = torch.empty(2 * world, dtype=torch.int32)
    _ext.run(ptrs, counts, world)
    hdl.barrier(channel=1)
    return x * int(counts.sum())
'''


def test_a_blocking_copy_of_a_count_to_the_host_is_a_host_sync_not_staging(tmp_path):
    rec = analyze(tmp_path, COUNTS)
    found = rules(rec)
    assert "host_staging" not in rec.label_values("mechanism")
    assert "PKB016" not in found
    assert "host_sync" in rec.label_values("sync")
    # reported once, at the timed call of the extension, naming its first blocking copy
    assert found.get("PKB008") == [line_of(rec, "_ext.run(ptrs, counts, world)")]
    message = next(f.message for f in rec.findings if f.rule == "PKB008")
    assert f"(line {line_of(rec, 'cudaMemcpy(&out[r]')})" in message


def test_a_blocking_copy_of_the_payload_to_the_host_is_staging(tmp_path):
    payload = COUNTS.replace("sizeof(int32_t), cudaMemcpyDeviceToHost);\n        cudaMemcpy(&out[world + r], remote + 1, sizeof(int32_t)",
                             "4096 * sizeof(int32_t), cudaMemcpyDeviceToHost);\n        cudaMemcpy(&out[world + r], remote + 1, 4096 * sizeof(int32_t)")
    assert "4096 * sizeof" in payload
    rec = analyze(tmp_path, payload)
    assert "host_staging" in rec.label_values("mechanism")
    assert line_of(rec, "cudaMemcpy(&out[r]") in rules(rec).get("PKB016", [])


STATS = r"""
__device__ void atomic_max_float(float* addr, float val) {
    int* a = reinterpret_cast<int*>(addr);
    int old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_int(fmaxf(val, __int_as_float(assumed))));
    } while (assumed != old);
}
__global__ void stats_kernel(const float* x, float* stats, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_float(stats, x[i]);
}
__global__ void reduce_kernel(const long long* ptrs, float* out, int world) {
    float m = -1e30f;
    for (int r = 0; r < world; ++r) m = fmaxf(m, ((const float*)ptrs[r])[0]);
    out[0] = m;
}
void stats(torch::Tensor x, torch::Tensor stats) {
    stats_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), stats.data_ptr<float>(), x.numel());
}
void reduce(torch::Tensor ptrs, torch::Tensor out, int world) {
    reduce_kernel<<<1, 1>>>((const long long*)ptrs.data_ptr<int64_t>(), out.data_ptr<float>(), world);
}
"""

GLOBAL_MAX = PYTHON_HEAD.format(cuda=STATS) + '''

def solution(x):
    buf, hdl, ptrs = _state(x)
    _ext.stats(x, buf)
    hdl.barrier(channel=0)
    out = torch.empty(1, device=x.device)
    _ext.reduce(ptrs, out, dist.get_world_size())
    return out
'''


def test_a_cas_update_loop_is_no_wait_so_the_unclosed_peer_read_is_flagged(tmp_path):
    # the next call's stats kernel rewrites buf while a slower peer may still read it
    rec = analyze(tmp_path, GLOBAL_MAX)
    assert line_of(rec, "_ext.reduce(ptrs") in rules(rec).get("PKB004", [])


def test_only_the_update_idiom_is_taken_out_of_the_waits():
    update = "do { assumed = old; old = atomicCAS(a, assumed, f(assumed)); } while (assumed != old);"
    polled = "while (atomicCAS(flag, 1, 0) != 1) {}"
    awaited = "do { old = atomicCAS(flag, expected, 0); } while (old != expected);"
    cas = lambda text: SimpleNamespace(snippet=text[text.index("atomicCAS"):].split(";")[0])
    assert _is_cas_update(cas(update), update)
    assert not _is_cas_update(cas(polled), polled)
    assert not _is_cas_update(cas(awaited), awaited)
