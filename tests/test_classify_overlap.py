"""Overlap on small candidates of our own: which problems compute, what counts as computation in a
kernel, and when a side stream really runs beside other work."""

import textwrap

import pytest

from analyzer.classify import problem_has_compute
from analyzer.kernel_compute import kernel_computes as _kernel_computes, one_thread as _one_thread
from analyzer.pipeline import StaticAnalyzer, StaticOptions
from pkb.corpus import read_candidate
from pkb.record import CandidateRecord


def test_a_collectives_own_reduction_is_not_computation():
    allreduce = """
        for (int64_t i = tid; i < n; i += blockDim.x * gridDim.x) {
            float sum = 0.f;
            for (int r = 0; r < world; ++r) sum += to_f(peers[r][i]);
            out[i] = from_f(sum);
        }"""
    rmsnorm = allreduce + "\n        y[i] = x[i] * rsqrtf(var + eps) * w[i];"
    gemv = "        acc += a[k] * b[k];"
    # a gather: products only address (subscripts, pointer arithmetic, address casts)
    gather = """
        x_full[row * H + col] = src[row * H_local + h];
        __nv_bfloat16* dst = out + recv_start * hidden;
        const int4* src_v = reinterpret_cast<const int4*>(src + src_start * hidden);"""
    quantize = "        q = static_cast<__nv_fp8_e4m3>(static_cast<float>(v) * inv_s);"
    assert not _kernel_computes(textwrap.dedent(gather).splitlines())
    assert _kernel_computes([quantize])
    assert not _kernel_computes(textwrap.dedent(allreduce).splitlines())
    assert _kernel_computes(textwrap.dedent(rmsnorm).splitlines())
    assert _kernel_computes([gemv])


def test_a_quotient_of_indices_or_layout_sizes_is_addressing_not_computation():
    # ThunderKittens all-to-all: which device a tile goes to is a quotient of an index by a
    # layout's size, `dst_dev_idx = batch_idx / G.output.batch();`; scaling a value stays compute.
    routing = ["    dst_dev_idx = batch_idx / G.output.batch();",
               "    row = tile_idx * G.output.rows();"]
    assert not _kernel_computes(routing)
    assert _kernel_computes(["    acc = x_val * scale;"])


def test_a_store_whose_address_casts_an_index_still_computes_its_value():
    # dequantizing a peer's fp8 into out[(int64_t)peer * P + i]: the cast sits in the address
    assert _kernel_computes(["        out_full[(int64_t)peer * P + local_idx] = __float2bfloat16(val * scale);"])
    assert not _kernel_computes(["        out_full[(int64_t)peer * P + local_idx] = src[(int64_t)peer * P + local_idx];"])
    assert not _kernel_computes(["        int64_t off = peer * P;"])


def test_a_product_of_indexed_operands_split_over_two_lines_is_computation():
    # a direct convolution: the operands' subscripts hold index names (in_idx, w_idx), the
    # product itself multiplies values, and the statement goes on to the next line
    conv = ["            acc += to_float<scalar_t>(input[in_idx]) *",
            "                   to_float<scalar_t>(weight[w_idx]);"]
    assert _kernel_computes(conv)
    assert not _kernel_computes(["    int64_t in_idx = ((b * C + c) * T + t) *", "        H + h;"])


def test_a_quotient_of_integer_variables_picks_a_peer_and_computes_nothing():
    # a scatter that derives the destination rank from a coordinate (`r = i1 / chunk0`) and
    # stores the element unchanged; the same quotient of float values computes
    scatter = ["__global__ void push_kernel(const float* x, const uint64_t* ptrs, uint32_t N1, uint32_t chunk0, uint64_t n) {",
               "    uint32_t i1 = threadIdx.x % N1;",
               "    uint32_t r;",
               "    r = i1 / chunk0;",
               "    float* dest = (float*)ptrs[r];",
               "    dest[i1] = x[i1];",
               "}"]
    assert not _kernel_computes(scatter)
    scaled = [ln.replace("uint32_t chunk0", "float chunk0").replace("uint32_t r;", "float r;") for ln in scatter]
    assert _kernel_computes(scaled)


def test_a_population_count_of_gathered_values_is_computation():
    # gathering peers' masks, then thresholding them into bit words and counting the set bits (an
    # area per mask) in the same kernel: the count derives new values from the gathered ones
    bitpack = ["            if (p < pixels && dst[p] > 0.0f) bits |= (1u << b);",
               "        local_area += __popc(bits);"]
    assert _kernel_computes(bitpack)
    assert not _kernel_computes(bitpack[:1])


def test_a_scatter_add_by_an_index_array_is_computation_and_a_counter_bump_is_not():
    # problem 66's backward: peers' rows summed into the seed rows an index array picks (the
    # reference's sparse.mm by a 0/1 matrix), directly or through an address made from the index
    pull = """    const float* src = reinterpret_cast<const float*>(data_ptrs[src_rank]);
        const int64_t dst_row = seed_inverse_ids[row];
        DEST
    """
    direct = pull.replace("DEST", "atomicAdd(grad_input + dst_row * feat + h, src[src_row * feat + h]);")
    aliased = pull.replace("DEST", "float* dst_ptr = grad_input + dst_row * feat;\n    atomicAdd(dst_ptr + h, src[h]);")
    nested = ["    atomicAdd(&out[ids[i] * H + h], peer[i * H + h]);"]
    assert _kernel_computes(direct.splitlines()) and _kernel_computes(aliased.splitlines()) and _kernel_computes(nested)
    # an all-reduce's elementwise atomic sum and a bucket cursor bumped by one are not
    assert not _kernel_computes(["    atomicAdd(out + i, peer[i]);"])
    assert not _kernel_computes(["    int owner = owners[i];", "    int pos = atomicAdd(&cursor[owner], 1);"])


def test_a_kernel_only_one_thread_runs_works_on_a_scalar():
    # the root of a sum over peers' partial norms: arithmetic, but nothing to overlap
    norm = """__global__ void total_norm(const int64_t* peer_ptrs, float* out, int n) {
        if (threadIdx.x == 0 && blockIdx.x == 0) {
            float total = 0.0f;
            for (int i = 0; i < n; ++i) total += *reinterpret_cast<const float*>(peer_ptrs[i]);
            *out = sqrtf(total);
        }
    }"""
    assert _kernel_computes(norm.splitlines()) and _one_thread(norm.splitlines())
    every_thread = """__global__ void scale(float* x, const float* norm, int n) {
        if (threadIdx.x == 0 && blockIdx.x == 0) { *flag = 1; }
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = x[i] / sqrtf(*norm);
    }"""
    assert not _one_thread(every_thread.splitlines())
    # the same single thread, written as an early return of every other one
    others_return = """__global__ void stats(const long long* ptrs, float* loss, int world) {
        if (threadIdx.x != 0 || blockIdx.x != 0) return;
        float s = 0.f;
        for (int r = 0; r < world; ++r) s += reinterpret_cast<const float*>(ptrs[r])[0];
        loss[0] = s / fmaxf(s, 1.0f);
    }"""
    assert _one_thread(others_return.splitlines())
    some_return = others_return.replace("if (threadIdx.x != 0 || blockIdx.x != 0) return;", "if (threadIdx.x >= world) return;")
    assert not _one_thread(some_return.splitlines())


@pytest.mark.parametrize(("path", "name", "pid", "expected"), [
    ("solutions_x/1_allreduce_cuda.py", "allreduce", 1, False),
    # PKB's files numbered 34 and up answer problem id - 1: 37 is ulysses_gather_seq_scatter_heads (36)
    ("solutions_x/37_ulysses_gather_seq_scatter_heads_cuda.py", "ulysses_gather_seq_scatter_heads", 37, False),
    ("solutions_x/13_gemm_allreduce_cuda.py", "gemm_allreduce", 13, True),
])
def test_problem_compute_matched_by_name(path, name, pid, expected):
    rec = CandidateRecord(path=path)
    rec.problem_id, rec.problem_name = pid, name
    assert problem_has_compute(rec) is expected


def test_unknown_problem_is_none():
    rec = CandidateRecord(path="x/999_something_new_cuda.py")
    rec.problem_id, rec.problem_name = 999, "something_new"
    assert problem_has_compute(rec) is None


SIDE = '''
import torch
import torch.distributed as dist

_side = torch.cuda.Stream()

def solution(A_local, B):
    world = dist.get_world_size()
    parts = [torch.empty_like(A_local) for _ in range(world)]
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        dist.all_gather(parts, A_local)
    BETWEEN
    torch.cuda.current_stream().wait_stream(_side)
    return torch.matmul(torch.cat(parts), B)
'''


@pytest.fixture(scope="module")
def analyzer():
    a = StaticAnalyzer(StaticOptions(ptx=False, use_cache=False))
    yield a
    a.close()


def overlap(analyzer, tmp_path, src):
    folder = tmp_path / "solutions_cuda_bf16_h100_8_test_overlap"
    folder.mkdir(exist_ok=True)
    (folder / "12_allgather_gemm_cuda.py").write_text(textwrap.dedent(src))
    rec = analyzer.analyze(read_candidate(folder / "12_allgather_gemm_cuda.py", tmp_path))
    return sorted(rec.label_values("overlap"))


def test_side_stream_joined_before_the_compute_is_not_multi_stream(analyzer, tmp_path):
    assert overlap(analyzer, tmp_path, SIDE.replace("    BETWEEN\n", "")) == ["none"]


def test_side_stream_with_work_before_the_join_is_multi_stream(analyzer, tmp_path):
    src = SIDE.replace("BETWEEN", "Bt = B.t().contiguous()")
    assert overlap(analyzer, tmp_path, src) == ["multi_stream"]


def test_more_work_on_the_same_side_stream_before_the_join_is_not_overlap(analyzer, tmp_path):
    # a second `with` block on the same stream queues behind the first one's transfer
    second = "with torch.cuda.stream(_side):\n        parts = [p.contiguous() for p in parts]"
    assert overlap(analyzer, tmp_path, SIDE.replace("BETWEEN", second)) == ["none"]
    other = "with torch.cuda.stream(_other):\n        parts = [p.contiguous() for p in parts]"
    src = SIDE.replace("BETWEEN", other).replace("_side = torch", "_other = torch.cuda.Stream()\n_side = torch")
    assert overlap(analyzer, tmp_path, src) == ["multi_stream"]


def test_side_streams_that_only_compute_overlap_nothing(analyzer, tmp_path):
    # two local reductions on side streams, no transfer anywhere on the run
    local = '''
import torch

_a, _b = torch.cuda.Stream(), torch.cuda.Stream()

def solution(A_local, B):
    cur = torch.cuda.current_stream()
    _a.wait_stream(cur)
    _b.wait_stream(cur)
    with torch.cuda.stream(_a):
        x = torch.matmul(A_local, B)
    with torch.cuda.stream(_b):
        y = A_local.float().norm()
    cur.wait_stream(_a)
    cur.wait_stream(_b)
    return x * y
'''
    assert overlap(analyzer, tmp_path, local) == ["none"]


def test_a_loop_on_one_stream_is_not_a_pipeline(analyzer, tmp_path):
    serial = '''
import torch
import torch.distributed as dist

def solution(A_local, B):
    outs = []
    for part in A_local.chunk(4):
        got = [torch.empty_like(part) for _ in range(dist.get_world_size())]
        dist.all_gather(got, part)
        outs.append(torch.matmul(torch.cat(got), B))
    return torch.cat(outs)
'''
    assert overlap(analyzer, tmp_path, serial) == ["none"]


ASYNC_LOOP = '''
import torch
import torch.distributed as dist

def solution(A_local, B):
    world = dist.get_world_size()
    outs, reqs = [], []
    for part in A_local.chunk(4):
        y = torch.matmul(part, B)
        got = torch.empty((world * y.shape[0], y.shape[1]), dtype=y.dtype, device=y.device)
        reqs.append(dist.all_gather_into_tensor(got, y, async_op=True))
        WAIT_IN_LOOP
        outs.append(got)
    for r in reqs:
        r.wait()
    return torch.cat(outs)
'''


def test_async_collectives_left_in_flight_across_a_loops_compute(analyzer, tmp_path):
    # chunk i's all-gather runs on NCCL's stream while chunk i+1's matmul runs
    assert overlap(analyzer, tmp_path, ASYNC_LOOP.replace("        WAIT_IN_LOOP\n", "")) == ["chunked_pipeline", "multi_stream"]
    # waited in the same iteration: one chunk after the other
    assert overlap(analyzer, tmp_path, ASYNC_LOOP.replace("WAIT_IN_LOOP", "reqs[-1].wait()")) == ["none"]


PEER_PULL_LOOP = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_streams = [torch.cuda.Stream() for _ in range(2)]

def solution(A_local, B):
    world, rank = dist.get_world_size(), dist.get_rank()
    buf = symm_mem.empty(A_local.numel() * world, dtype=A_local.dtype, device=A_local.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    hdl.barrier(channel=0)
    cur = torch.cuda.current_stream()
    for i in range(1, world):
        peer = (rank + i) % world
        s = _streams[i % len(_streams)]
        WORK
        with torch.cuda.stream(s):
            hdl.get_buffer(peer, A_local.shape, A_local.dtype).copy_(A_local)
    for s in _streams:
        ev = torch.cuda.Event()
        ev.record(s)
        cur.wait_event(ev)
    return torch.matmul(buf.view(-1, B.shape[0]), B)
'''


def test_peer_copies_joined_by_events_after_the_loop_with_no_work_in_it_are_serial(analyzer, tmp_path):
    # the index arithmetic and reading the handle's table issue no GPU work: no overlap, no pipeline
    assert overlap(analyzer, tmp_path, PEER_PULL_LOOP.replace("        WORK\n", "")) == ["none"]


def test_side_stream_in_a_loop_beside_the_next_iterations_compute_is_multi_stream(analyzer, tmp_path):
    src = PEER_PULL_LOOP.replace("WORK", "part = torch.matmul(A_local, B)")
    assert "multi_stream" in overlap(analyzer, tmp_path, src)


FUSED_UPDATE = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void reduce_update(const int64_t* peers, float* p, float lr, int world, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = 0.f;
    for (int r = 0; r < world; ++r) g += reinterpret_cast<const float*>(peers[r])[i];
    p[i] = p[i] - lr * rsqrtf(g * g + 1e-8f) * g;
}
void update(torch::Tensor peers, torch::Tensor p, double lr, int64_t world) {
    int n = p.numel();
    reduce_update<<<(n + 255) / 256, 256>>>(peers.data_ptr<int64_t>(), p.data_ptr<float>(), lr, world, n);
}
"""
_ext = load_inline("fused", cpp_sources="", cuda_sources=CUDA, functions=["update"])

def solution(A_local, B):
    grad = torch.matmul(A_local, B)
    buf = symm_mem.empty(grad.numel(), device=grad.device, dtype=grad.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    buf.copy_(grad.flatten())
    hdl.barrier(channel=0)
    peers = torch.tensor(hdl.buffer_ptrs, device=grad.device)
    if GUARD:
        _ext.update(peers, B, 0.1, dist.get_world_size())
    hdl.barrier(channel=0)
    return B
'''


def test_a_kernel_that_pulls_peers_and_updates_is_fused_beside_torch_compute(analyzer, tmp_path):
    assert "fused_kernel" in overlap(analyzer, tmp_path, FUSED_UPDATE.replace("GUARD", "True"))


def test_a_fused_kernel_only_a_skipped_branch_launches_is_not_the_overlap(analyzer, tmp_path):
    skipped = FUSED_UPDATE.replace("GUARD", "dist.get_world_size() == 1")
    assert "fused_kernel" not in overlap(analyzer, tmp_path, skipped)


LOCAL_STEP = '''
import torch

def solution(flat_param_shard, flat_grad_shard, exp_avg_shard, exp_avg_sq_shard, lr, beta1, beta2, eps, weight_decay, step):
    exp_avg_shard.mul_(beta1).add_(flat_grad_shard, alpha=1 - beta1)
    exp_avg_sq_shard.mul_(beta2).addcmul_(flat_grad_shard, flat_grad_shard, value=1 - beta2)
    flat_param_shard.addcdiv_(exp_avg_shard, exp_avg_sq_shard.sqrt().add_(eps), value=-lr)
    return flat_param_shard
'''


def _overlap_of(analyzer, tmp_path, name, src):
    folder = tmp_path / "solutions_cuda_bf16_h100_8_test_overlap"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(textwrap.dedent(src))
    return sorted(analyzer.analyze(read_candidate(folder / name, tmp_path)).label_values("overlap"))


def test_a_problem_that_moves_no_data_between_ranks_has_no_overlap_to_judge(analyzer, tmp_path):
    # PKB problem 46, fsdp_adamw_sharded (its files are numbered 47): a purely local optimizer step on each rank's shard
    assert _overlap_of(analyzer, tmp_path, "47_fsdp_adamw_sharded_cuda.py", LOCAL_STEP) == ["n/a"]


def test_the_same_local_code_for_a_problem_that_communicates_is_serial(analyzer, tmp_path):
    # problem 47, fsdp_step_e2e, computes and communicates: code that only computes overlaps nothing
    assert _overlap_of(analyzer, tmp_path, "48_fsdp_step_e2e_cuda.py", LOCAL_STEP) == ["none"]


HANDLE = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="cp", cpp_sources="void async_copy(torch::Tensor dst, int64_t src, int64_t n, int64_t stream);",
                   functions=["async_copy"])
_cache = {}


def solution(A_local, B):
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(A_local.shape, device=A_local.device, dtype=A_local.dtype)
        st = (buf, symm_mem.rendezvous(buf, dist.group.WORLD), torch.cuda.Stream())
        _cache["st"] = st
    buf, hdl, copy_stream = st
    buf.copy_(A_local)
    hdl.barrier(channel=0)
    peer = (dist.get_rank() + 1) % dist.get_world_size()
    nxt = torch.empty_like(A_local)
    done = torch.cuda.Event()
    _ext.async_copy(nxt, int(hdl.buffer_ptrs[peer]), nxt.numel(), STREAM.cuda_stream)
    done.record(STREAM)
    BETWEEN
    torch.cuda.current_stream().wait_event(done)
    out = torch.cat([A_local @ B, nxt @ B])
    hdl.barrier(channel=0)
    return out
'''


def test_a_copy_handed_a_side_streams_handle_beside_compute_is_multi_stream(analyzer, tmp_path):
    src = HANDLE.replace("STREAM", "copy_stream").replace("BETWEEN", "local = A_local @ B")
    assert "multi_stream" in overlap(analyzer, tmp_path, src)


def test_the_same_copy_on_the_current_streams_handle_is_not(analyzer, tmp_path):
    src = HANDLE.replace("STREAM", "torch.cuda.current_stream()").replace("BETWEEN", "local = A_local @ B")
    assert "multi_stream" not in overlap(analyzer, tmp_path, src)


def test_launches_with_the_handle_inside_a_side_stream_block_are_judged_with_the_block(analyzer, tmp_path):
    # two copies in one `with` block, joined right after it with nothing in between: serial
    src = HANDLE.replace("STREAM", "copy_stream").replace("    BETWEEN\n", "")
    src = src.replace("    _ext.async_copy(nxt, int(hdl.buffer_ptrs[peer]), nxt.numel(), copy_stream.cuda_stream)\n",
                      "    with torch.cuda.stream(copy_stream):\n"
                      "        _ext.async_copy(nxt, int(hdl.buffer_ptrs[peer]), nxt.numel(), copy_stream.cuda_stream)\n"
                      "        _ext.async_copy(nxt, int(hdl.buffer_ptrs[peer]), nxt.numel(), copy_stream.cuda_stream)\n")
    assert "with torch.cuda.stream(copy_stream):" in src
    assert "multi_stream" not in overlap(analyzer, tmp_path, src)


PREFETCH_LOOP = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_copy_stream = torch.cuda.Stream()

def solution(A_local, B):
    world, rank = dist.get_world_size(), dist.get_rank()
    buf = symm_mem.empty(A_local.shape, dtype=A_local.dtype, device=A_local.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    buf.copy_(A_local)
    hdl.barrier(channel=0)
    cur = torch.cuda.current_stream()
    slots = [torch.empty_like(A_local) for _ in range(2)]
    outs = []
    for step in range(world):
        peer = (rank + step) % world
        SERIALISE
        with torch.cuda.stream(_copy_stream):
            slots[step % 2].copy_(hdl.get_buffer(peer, A_local.shape, A_local.dtype))
            ready = torch.cuda.Event()
            ready.record(_copy_stream)
        cur.wait_event(ready)
        outs.append(torch.matmul(slots[step % 2], B))
    hdl.barrier(channel=0)
    return torch.cat(outs)
'''


def test_a_transfer_joined_inside_the_loop_runs_beside_the_previous_chunks_compute(analyzer, tmp_path):
    # this step's matmul is issued after the join, the next step's copy goes on the side stream
    # without waiting for it: the two run together
    src = PREFETCH_LOOP.replace("        SERIALISE\n", "")
    assert "multi_stream" in overlap(analyzer, tmp_path, src)


def test_the_same_loop_whose_side_stream_waits_for_the_current_one_is_not_multi_stream(analyzer, tmp_path):
    src = PREFETCH_LOOP.replace("SERIALISE", "_copy_stream.wait_stream(cur)")
    assert "multi_stream" not in overlap(analyzer, tmp_path, src)


TRITON_BESIDE = '''
import torch
import torch.distributed as dist
import triton
import triton.language as tl

_side = torch.cuda.Stream()


@triton.jit
def _local_loss(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.exp(x) * x, mask=offs < n)


def solution(A_local, B):
    parts = [torch.empty_like(A_local) for _ in range(dist.get_world_size())]
    local = torch.empty_like(A_local)
    grid = (triton.cdiv(A_local.numel(), 1024),)
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        dist.all_gather(parts, A_local)
    _local_loss[grid](A_local, local, A_local.numel(), BLOCK=1024)
    torch.cuda.current_stream().wait_stream(_side)
    return torch.matmul(torch.cat(parts), B) + local.sum()
'''


def test_a_triton_launch_before_the_join_is_work_beside_the_side_stream(analyzer, tmp_path):
    # `kernel[grid](...)` has no name right before its parenthesis: it is still GPU work
    assert "multi_stream" in overlap(analyzer, tmp_path, TRITON_BESIDE)


TWO_LOOPS = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_comm = torch.cuda.Stream()

def solution(A_local, B):
    world, rank = dist.get_world_size(), dist.get_rank()
    buf = symm_mem.empty(A_local.shape, dtype=A_local.dtype, device=A_local.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    buf.copy_(A_local)
    hdl.barrier(channel=0)
    cur = torch.cuda.current_stream()
    _comm.wait_stream(cur)
    full = torch.empty((world,) + tuple(A_local.shape), dtype=A_local.dtype, device=A_local.device)
    ready = [torch.cuda.Event() for _ in range(world)]
    for c in range(world):
        with torch.cuda.stream(_comm):
            full[c].copy_(hdl.get_buffer(c, A_local.shape, A_local.dtype))
            ready[c].record(_comm)
    outs = []
    for c in range(world):
        WAIT
        outs.append(torch.matmul(full[c], B))
    hdl.barrier(channel=0)
    return torch.cat(outs)
'''


def test_a_compute_loop_waiting_on_each_chunks_own_event_pipelines_with_the_transfer_loop(analyzer, tmp_path):
    src = TWO_LOOPS.replace("WAIT", "ready[c].wait(cur)")
    assert "chunked_pipeline" in overlap(analyzer, tmp_path, src)


def test_a_compute_loop_after_one_join_of_the_whole_transfer_is_not_a_pipeline(analyzer, tmp_path):
    src = TWO_LOOPS.replace("WAIT", "cur.wait_stream(_comm)")
    assert "chunked_pipeline" not in overlap(analyzer, tmp_path, src)


TWO_STREAM_LOOP = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="steps", cpp_sources="void step(torch::Tensor p, int64_t s); void gather(torch::Tensor o, int64_t ptrs, int64_t s);",
                   functions=["step", "gather"])
_side = torch.cuda.Stream()

def solution(A_local, B):
    buf = symm_mem.empty(A_local.shape, dtype=A_local.dtype, device=A_local.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    cur = torch.cuda.current_stream()
    done = [torch.cuda.Event() for _ in range(4)]
    out = torch.empty_like(A_local)
    for c in range(4):
        _ext.step(buf, cur.cuda_stream)
        done[c].record(cur)
        _side.wait_event(done[c])
        _ext.gather(out, int(hdl.buffer_ptrs[0]), SECOND.cuda_stream)
    cur.wait_stream(_side)
    return out
'''


def test_a_loop_launching_on_two_streams_linked_by_each_chunks_event_is_a_pipeline(analyzer, tmp_path):
    assert "chunked_pipeline" in overlap(analyzer, tmp_path, TWO_STREAM_LOOP.replace("SECOND", "_side"))


def test_the_same_loop_on_one_stream_is_not(analyzer, tmp_path):
    assert "chunked_pipeline" not in overlap(analyzer, tmp_path, TWO_STREAM_LOOP.replace("SECOND", "cur"))


RING_ASYNC = '''
import torch
import torch.distributed as dist


class Ring:
    def __init__(self, group):
        self.group = group
        self.ops = []
        self.reqs = None

    def send_recv(self, t):
        buf = torch.empty_like(t)
        self.ops.append(dist.P2POp(dist.isend, t, (dist.get_rank() + 1) % 8, group=self.group))
        self.ops.append(dist.P2POp(dist.irecv, buf, (dist.get_rank() - 1) % 8, group=self.group))
        return buf

    def commit(self):
        self.reqs = dist.batch_isend_irecv(self.ops)

    def wait(self):
        for r in self.reqs:
            r.wait()
        self.ops = []


def _block(q, k):
    return torch.matmul(q, k.transpose(-1, -2)).softmax(-1)


def solution(q, k, group=None):
    ring = Ring(group)
    out = torch.zeros_like(q)
    for step in range(8):
        COMMIT
        out += _block(q, k)
        WAIT
    return out
'''


def test_async_library_transfers_waited_for_after_the_compute_are_multi_stream(analyzer, tmp_path):
    overlapped = RING_ASYNC.replace("COMMIT", "nxt = ring.send_recv(k)\n        ring.commit()").replace(
        "WAIT", "ring.wait()\n        k = nxt")
    assert overlap(analyzer, tmp_path, overlapped) == ["multi_stream"]
    # waited for before the compute: one after the other
    serial = RING_ASYNC.replace("COMMIT", "nxt = ring.send_recv(k)\n        ring.commit()\n        ring.wait()").replace(
        "WAIT", "k = nxt")
    assert overlap(analyzer, tmp_path, serial) == ["none"]


EVENT_GATED = '''
import torch
import torch.distributed as dist

_side = torch.cuda.Stream()

def solution(A_local, B):
    world = dist.get_world_size()
    parts = [torch.empty_like(A_local) for _ in range(world)]
    ready = torch.cuda.Event()
    ready.record()
    BEFORE
    with torch.cuda.stream(_side):
        WAIT
        dist.all_gather(parts, A_local)
        done = torch.cuda.Event()
        done.record()
    torch.cuda.current_stream().wait_event(done)
    return torch.matmul(torch.cat(parts), B)
'''


def test_work_issued_after_the_awaited_event_and_before_the_side_block_is_multi_stream(analyzer, tmp_path):
    # the side stream waits only for what `ready` recorded: the transpose issued after it runs beside
    src = EVENT_GATED.replace("BEFORE", "Bt = B.t().contiguous()").replace("WAIT", "_side.wait_event(ready)")
    assert overlap(analyzer, tmp_path, src) == ["multi_stream"]


def test_the_same_work_before_a_side_stream_that_waits_for_the_whole_current_stream_is_serial(analyzer, tmp_path):
    src = EVENT_GATED.replace("BEFORE", "Bt = B.t().contiguous()").replace(
        "WAIT", "_side.wait_stream(torch.cuda.current_stream())")
    assert overlap(analyzer, tmp_path, src) == ["none"]


def test_no_work_between_the_awaited_event_and_the_side_block_is_serial(analyzer, tmp_path):
    src = EVENT_GATED.replace("    BEFORE\n", "").replace("WAIT", "_side.wait_event(ready)")
    assert overlap(analyzer, tmp_path, src) == ["none"]


PER_ITERATION = '''
import torch
import torch.distributed as dist

def solution(A_local, B):
    world = dist.get_world_size()
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    for i in range(2):
        with torch.cuda.stream(streams[i]):
            parts = [torch.empty_like(A_local) for _ in range(world)]
            dist.all_gather(parts, A_local)
            WORK
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    return torch.cat(outs)
'''


def test_a_stream_per_iteration_joined_after_the_loop_overlaps_the_next_transfer_with_this_compute(analyzer, tmp_path):
    src = PER_ITERATION.replace("WORK", "outs.append(torch.matmul(torch.cat(parts), B))")
    assert "multi_stream" in overlap(analyzer, tmp_path, src)


def test_a_stream_per_iteration_that_only_transfers_overlaps_no_compute(analyzer, tmp_path):
    src = PER_ITERATION.replace("WORK", "outs.append(torch.cat(parts))")
    assert "multi_stream" not in overlap(analyzer, tmp_path, src)


def test_a_stream_picked_per_iteration_into_a_name_is_a_stream_per_iteration(analyzer, tmp_path):
    src = PER_ITERATION.replace("WORK", "outs.append(torch.matmul(torch.cat(parts), B))").replace(
        "        with torch.cuda.stream(streams[i]):", "        s = streams[i]\n        with torch.cuda.stream(s):")
    assert "s = streams[i]" in src
    assert "multi_stream" in overlap(analyzer, tmp_path, src)


def test_the_average_a_reduction_ends_in_is_the_collectives_not_computation():
    # reduce-scatter with AVG: the sum over peers times one over the world size
    assert not _kernel_computes(["        out[i] = __float2bfloat16(sum * inv_ws);"])
    assert not _kernel_computes(["        out[i] = acc / (float)world_size;"])
    assert not _kernel_computes(["        float b = __bfloat162float(v.y) * (1.0f / world_size);"])
    # a mean over the hidden size, or a scale of the data, is computation
    assert _kernel_computes(["        float mean = sum / hidden_size * gamma[i];"])
    assert _kernel_computes(["        out[i] = __float2bfloat16(sum * inv_rms);"])


CHUNKS_ON_STREAMS = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void gather_kernel(const int64_t* ptrs, float* out, int start, int n, int world) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < world; ++p) {
        const float* src = reinterpret_cast<const float*>(ptrs[p]);
        if (i < n) out[p * n + i] = src[start + i];
    }
}

__global__ void softmax_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = expf(x[i]);
}

void gather(torch::Tensor ptrs, torch::Tensor out, int64_t start, int64_t n, int64_t world) {
    gather_kernel<<<(n + 255) / 256, 256>>>(ptrs.data_ptr<int64_t>(), out.data_ptr<float>(), start, n, world);
}

void softmax(torch::Tensor x, torch::Tensor y) {
    softmax_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}
"""

_ext = load_inline("chunks_ext", cpp_sources="", cuda_sources=CUDA, functions=["gather", "softmax"])
_streams = [torch.cuda.Stream() for _ in range(2)]


def solution(A_local, B):
    world = dist.get_world_size()
    buf = symm_mem.empty(A_local.numel(), device=A_local.device, dtype=A_local.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    ptrs = torch.tensor(hdl.buffer_ptrs, device=A_local.device, dtype=torch.int64)
    buf.copy_(A_local.flatten())
    hdl.barrier(channel=0)
    n = A_local.numel() // 2
    parts = torch.empty(2, world * n, device=A_local.device)
    outs = torch.empty_like(parts)
    main = torch.cuda.current_stream()
    for i in range(2):
        with torch.cuda.stream(_streams[i]):
            _streams[i].wait_stream(main)
            _ext.gather(ptrs, parts[i], i * n, n, world)
            _ext.softmax(parts[i], outs[i])
    for s in _streams:
        main.wait_stream(s)
    return outs
'''


def test_chunks_on_their_own_streams_whose_kernels_compute_overlap(analyzer, tmp_path):
    # each chunk gathers from the peers then computes on its own stream, joined after the loop:
    # the next chunk's gather runs beside this one's compute, both through extension kernels
    assert "multi_stream" in overlap(analyzer, tmp_path, CHUNKS_ON_STREAMS)
    local_only = CHUNKS_ON_STREAMS.replace("y[i] = expf(x[i]);", "y[i] = x[i];")
    assert "multi_stream" not in overlap(analyzer, tmp_path, local_only)
