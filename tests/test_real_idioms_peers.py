"""How real model output walks, names and guards its peers, each on a small candidate of our own:
a kernel local named `rank` that indexes the peers, metadata exchanged beside the payload, and a
kernel branch for a missing multicast address.
"""

from __future__ import annotations

from static_helpers import analyze


PULL_BY_BLOCK_ROW = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void gather_peers_kernel(const long long* peer_ptrs, char* out, int64_t shard_bytes, int world_size) {
    int rank = blockIdx.y;
    if (rank >= world_size) return;
    const char* src = (const char*)peer_ptrs[rank];
    char* dst = out + (int64_t)rank * shard_bytes;
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < shard_bytes; i += gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

void launch_gather(torch::Tensor ptrs, torch::Tensor out, int64_t shard_bytes, int64_t world_size) {
    dim3 grid(64, world_size);
    gather_peers_kernel<<<grid, 256>>>((const long long*)ptrs.data_ptr<int64_t>(), (char*)out.data_ptr(), shard_bytes, world_size);
}
"""

_ext = load_inline("gather_ext", cpp_sources="", cuda_sources=CUDA, functions=["launch_gather"])
_cache = {}


def _resources(x, group):
    key = (tuple(x.shape), x.dtype)
    if key in _cache:
        return _cache[key]
    buf = symm_mem.empty(x.shape, device=x.device, dtype=x.dtype)
    hdl = symm_mem.rendezvous(buf, group)
    ptrs = torch.tensor(list(hdl.buffer_ptrs), device=x.device, dtype=torch.int64)
    _cache[key] = (buf, hdl, ptrs)
    return _cache[key]


def solution(x: torch.Tensor, group=None) -> torch.Tensor:
    group = group or dist.group.WORLD
    world_size = dist.get_world_size(group)
    buf, hdl, ptrs = _resources(x, group)
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty((world_size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    _ext.launch_gather(ptrs, out, x.numel() * x.element_size(), world_size)
    hdl.barrier(channel=1)
    return out
'''


def test_a_kernel_local_named_rank_from_the_block_index_walks_the_peers(tmp_path):
    rec = analyze(tmp_path, "2_allgather_cuda.py", PULL_BY_BLOCK_ROW)
    assert rec.label_values("mechanism") == ["sm_load"]


def test_a_rank_computed_from_a_thread_index_local_walks_the_peers(tmp_path):
    # `int64_t tid = blockIdx.x * blockDim.x + threadIdx.x; int rank = tid / per;`: the rank is the
    # thread's position, through another local
    src = PULL_BY_BLOCK_ROW.replace("""    int rank = blockIdx.y;
    if (rank >= world_size) return;""", """    int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int rank = (int)(tid / shard_bytes);
    if (rank >= world_size) return;""")
    assert "int rank = (int)(tid / shard_bytes);" in src
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert rec.label_values("mechanism") == ["sm_load"]
    # brace initialisation, directly from the block index
    braced = PULL_BY_BLOCK_ROW.replace("int rank = blockIdx.y;", "int rank{(int)blockIdx.y};")
    assert "int rank{(int)blockIdx.y};" in braced
    assert analyze(tmp_path, "2_allgather_cuda.py", braced).label_values("mechanism") == ["sm_load"]


def test_the_rank_passed_as_a_kernel_parameter_still_names_this_ranks_buffer(tmp_path):
    src = PULL_BY_BLOCK_ROW.replace("int64_t shard_bytes, int world_size) {\n    int rank = blockIdx.y;",
                                    "int64_t shard_bytes, int world_size, int rank) {")
    src = src.replace("shard_bytes, world_size);\n}", "shard_bytes, world_size, 0);\n}")
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert "int rank = blockIdx.y" not in rec.source
    assert rec.label_values("mechanism") == ["none"]


def test_a_table_of_the_inputs_own_addresses_walked_like_peers_is_local(tmp_path):
    # the same kernel fed `[t.data_ptr() for t in xs]`: the candidate's own input tensors, one per
    # block row, read as the peers' buffers would be; no byte crosses to another GPU
    src = PULL_BY_BLOCK_ROW.replace("def solution(x: torch.Tensor, group=None)", "def solution(x: torch.Tensor, xs: list, group=None)")
    src = src.replace("_ext.launch_gather(ptrs, out,",
                      "table = torch.tensor([t.data_ptr() for t in xs], device=x.device, dtype=torch.int64)\n"
                      "    _ext.launch_gather(table, out,")
    assert src.count("[t.data_ptr() for t in xs]") == 1
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert rec.label_values("mechanism") == ["none"]


VECTOR_OF_PEERS = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <vector>

__global__ void push_kernel(const float4* src, float4* const* peers, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4* dst = peers[blockIdx.y];
    if (i < n) dst[i] = src[i];
}

void push(torch::Tensor src, std::vector<int64_t> peer_ptrs, int64_t n) {
    int world = peer_ptrs.size();
    torch::Tensor table = torch::empty({world}, src.options().dtype(torch::kInt64));
    table.copy_(torch::tensor(peer_ptrs, torch::kInt64));
    dim3 grid((n + 255) / 256, world);
    push_kernel<<<grid, 256>>>((const float4*)src.data_ptr(), reinterpret_cast<float4* const*>(table.data_ptr<int64_t>()), n);
}
"""

_ext = load_inline("push_ext", cpp_sources="", cuda_sources=CUDA, functions=["push"])
_cache = {}


def solution(x: torch.Tensor, group=None) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, [int(p) for p in hdl.buffer_ptrs])
        _cache["st"] = st
    buf, hdl, ptrs = st
    hdl.barrier(channel=0)
    _ext.push(x, ptrs, x.numel() // 4)
    hdl.barrier(channel=1)
    return buf.clone()
'''


def test_a_host_vector_of_peer_addresses_copied_into_a_device_table_is_pushed_through(tmp_path):
    rec = analyze(tmp_path, "3_broadcast_cuda.py", VECTOR_OF_PEERS)
    assert rec.label_values("mechanism") == ["sm_store"]


COUNTS_BESIDE_PAYLOAD = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void gather_counts_kernel(const int64_t* peer_ptrs, int* out, int world_size, int num_experts) {
    int r = blockIdx.x;
    const int* peer_count = reinterpret_cast<const int*>(peer_ptrs[r]);
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) out[r * num_experts + e] = peer_count[e];
}

__global__ void push_rows_kernel(const float4* src, const int64_t* dst_ptrs, int world_size, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int p = 0; p < world_size; ++p) reinterpret_cast<float4*>(dst_ptrs[p])[i] = src[i];
}

void exchange(torch::Tensor counts_ptrs, torch::Tensor counts_out, torch::Tensor src, torch::Tensor dst_ptrs,
              int64_t world_size, int64_t num_experts, int64_t n) {
    gather_counts_kernel<<<world_size, 128>>>(counts_ptrs.data_ptr<int64_t>(), counts_out.data_ptr<int>(), world_size, num_experts);
    push_rows_kernel<<<(n + 255) / 256, 256>>>((const float4*)src.data_ptr(), dst_ptrs.data_ptr<int64_t>(), world_size, n);
}
"""

_ext = load_inline("moe_ext", cpp_sources="", cuda_sources=CUDA, functions=["exchange"])
_cache = {}


def solution(x: torch.Tensor, counts: torch.Tensor, group=None) -> torch.Tensor:
    group = group or dist.group.WORLD
    world_size = dist.get_world_size(group)
    st = _cache.get("st")
    if st is None:
        cbuf = symm_mem.empty(counts.numel(), device=x.device, dtype=torch.int32)
        chdl = symm_mem.rendezvous(cbuf, group)
        buf = symm_mem.empty(x.numel() * world_size, device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, group)
        st = (cbuf, chdl, torch.tensor(chdl.buffer_ptrs, device=x.device), buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device))
        _cache["st"] = st
    cbuf, chdl, cptrs, buf, hdl, ptrs = st
    cbuf.copy_(counts)
    out_counts = torch.empty(world_size * counts.numel(), dtype=torch.int32, device=x.device)
    hdl.barrier(channel=0)
    _ext.exchange(cptrs, out_counts, x, ptrs, world_size, counts.numel(), x.numel() // 4)
    hdl.barrier(channel=0)
    return buf.clone()
'''


def test_counts_read_from_peers_beside_a_pushed_payload_are_not_the_mechanism(tmp_path):
    rec = analyze(tmp_path, "51_moe_ep_wide_cuda.py", COUNTS_BESIDE_PAYLOAD)
    assert rec.label_values("mechanism") == ["sm_store"]
    counts_kernel = next(k for k in rec.kernels if k.name == "gather_counts_kernel")
    assert [lab.value for lab in counts_kernel.labels["mechanism"]] == ["sm_load"]  # still shown per kernel


def test_a_peers_prefix_offsets_read_beside_a_pushed_payload_are_metadata(tmp_path):
    # `remote_prefix[dst_rot_idx]`: where in the peer's buffer to write, read from the peer
    src = COUNTS_BESIDE_PAYLOAD.replace("gather_counts_kernel", "gather_prefix_kernel").replace("peer_count", "remote_prefix")
    rec = analyze(tmp_path, "51_moe_ep_wide_cuda.py", src)
    assert rec.label_values("mechanism") == ["sm_store"]
    # a kernel named for a prefix (a causal convolution's halo) still moves payload
    payload = COUNTS_BESIDE_PAYLOAD.replace("gather_counts_kernel", "conv_prefix_kernel").replace("peer_count", "peer_rows")
    assert set(analyze(tmp_path, "51_moe_ep_wide_cuda.py", payload).label_values("mechanism")) == {"sm_load", "sm_store"}


def test_a_peer_load_of_payload_is_kept_even_in_a_file_that_also_exchanges_counts(tmp_path):
    src = COUNTS_BESIDE_PAYLOAD.replace("gather_counts_kernel", "gather_rows_kernel").replace("peer_count", "peer_rows")
    rec = analyze(tmp_path, "51_moe_ep_wide_cuda.py", src)
    assert set(rec.label_values("mechanism")) == {"sm_load", "sm_store"}


def test_metadata_alone_still_names_the_mechanism(tmp_path):
    src = COUNTS_BESIDE_PAYLOAD.replace(
        "    push_rows_kernel<<<(n + 255) / 256, 256>>>((const float4*)src.data_ptr(), dst_ptrs.data_ptr<int64_t>(), world_size, n);\n", "")
    rec = analyze(tmp_path, "51_moe_ep_wide_cuda.py", src)
    assert "sm_load" in rec.label_values("mechanism")


FLAG_HELPER = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__device__ void HELPER(uint32_t* addr) {
    uint32_t old;
    do { asm volatile("atom.global.relaxed.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(addr) : "memory"); } while (old != 0u);
}

__global__ void pull_kernel(const uint64_t* buffer_ptrs, float* out, int rank, int world_size, int n) {
    if (threadIdx.x < world_size && blockIdx.x == 0) {
        HELPER(reinterpret_cast<uint32_t*>(buffer_ptrs[threadIdx.x]) + n + rank);
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.f;
        for (int p = 0; p < world_size; ++p) acc += reinterpret_cast<const float*>(buffer_ptrs[p])[i];
        out[i] = acc;
    }
}

void run(int64_t buffer_ptrs, torch::Tensor out, int64_t rank, int64_t world_size, int64_t n) {
    pull_kernel<<<(n + 255) / 256, 256>>>(reinterpret_cast<const uint64_t*>(buffer_ptrs), out.data_ptr<float>(), rank, world_size, n);
}
"""

_ext = load_inline("flag_ext", cpp_sources="", cuda_sources=CUDA, functions=["run"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(2 * x.numel(), device=x.device, dtype=torch.float32)
        st = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
        _cache["st"] = st
    buf, hdl = st
    buf[: x.numel()].copy_(x)
    out = torch.empty_like(x)
    _ext.run(hdl.buffer_ptrs_dev, out, dist.get_rank(), dist.get_world_size(), x.numel())
    return out
'''


def test_a_system_scope_cas_in_a_helper_named_as_a_signal_is_a_flag_not_sm_atomic(tmp_path):
    rec = analyze(tmp_path, "1_allreduce_cuda.py", FLAG_HELPER.replace("HELPER", "send_signal"))
    assert rec.label_values("mechanism") == ["sm_load"]
    assert "device_flags" in rec.label_values("sync")


def test_the_same_cas_in_a_helper_named_for_data_is_still_sm_atomic(tmp_path):
    rec = analyze(tmp_path, "1_allreduce_cuda.py", FLAG_HELPER.replace("HELPER", "claim_slot"))
    assert set(rec.label_values("mechanism")) == {"sm_load", "sm_atomic"}


TEMPLATE_PULL = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

template <typename T>
__global__ void gather_kernel(const long long* data_ptrs, T* out, long long src_off, long long n) {
    int peer = blockIdx.x;
    const T* src = reinterpret_cast<const T*>((uintptr_t)data_ptrs[peer]) + src_off;
    T* dst = out + peer * n;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

void gather(torch::Tensor ptrs, torch::Tensor out, int64_t world_size, int64_t n) {
    gather_kernel<at::BFloat16><<<world_size, 256>>>((const long long*)ptrs.data_ptr<int64_t>(),
                                                     out.data_ptr<at::BFloat16>(), 0, n);
}
"""

_ext = load_inline("tpl_ext", cpp_sources="", cuda_sources=CUDA, functions=["gather"])
_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=x.device, dtype=torch.int64))
        _cache["st"] = st
    buf, hdl, ptrs = st
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty(dist.get_world_size() * x.numel(), device=x.device, dtype=x.dtype)
    _ext.gather(PTRS, out, dist.get_world_size(), x.numel())
    hdl.barrier(channel=0)
    return out
'''


def test_pointer_arithmetic_on_a_peer_address_in_a_template_kernel_is_followed(tmp_path):
    rec = analyze(tmp_path, "2_allgather_cuda.py", TEMPLATE_PULL.replace("PTRS", "ptrs"))
    assert rec.label_values("mechanism") == ["sm_load"]


def test_the_same_template_kernel_fed_local_addresses_moves_nothing(tmp_path):
    # (parameters named like peer pointers, `data_ptrs`, `ptrs`, would be guessed to be ones: renamed)
    src = TEMPLATE_PULL.replace("PTRS", "torch.full((dist.get_world_size(),), buf.data_ptr(), device=x.device)")
    src = src.replace("data_ptrs", "bases").replace("torch::Tensor ptrs", "torch::Tensor bases_t")
    src = src.replace("(const long long*)ptrs.data_ptr", "(const long long*)bases_t.data_ptr")
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert "sm_load" not in rec.label_values("mechanism")


TEMPLATE_HELPER = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

template <typename T>
__device__ __forceinline__ float ld(const T* p, long long i) { return (float)p[i]; }

template <typename P>
__global__ void reduce_update_kernel(const long long* grad_ptrs, float* w, float lr, int world_size, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = 0.f;
    for (int r = 0; r < world_size; ++r) {
        const P* gp = reinterpret_cast<const P*>((uintptr_t)grad_ptrs[r]);
        g += ld<P>(gp, i);
    }
    UPDATE
}

template <typename T>
__global__ void scale_kernel(const T* x, float* y, float s, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ld<T>(x, i) * s;
}

void step(torch::Tensor ptrs, torch::Tensor w, torch::Tensor x, torch::Tensor y, double lr, int64_t world_size) {
    long long n = w.numel();
    reduce_update_kernel<float><<<(n + 255) / 256, 256>>>((const long long*)ptrs.data_ptr<int64_t>(), w.data_ptr<float>(), (float)lr, world_size, n);
    scale_kernel<float><<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), 0.5f, n);
}
"""

_ext = load_inline("tpl_helper_ext", cpp_sources="", cuda_sources=CUDA, functions=["step"])
_cache = {}


def solution(grad: torch.Tensor, w: torch.Tensor, lr: float) -> torch.Tensor:
    st = _cache.get("st")
    if st is None:
        buf = symm_mem.empty(grad.numel(), device=grad.device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        st = (buf, hdl, torch.tensor(hdl.buffer_ptrs, device=grad.device, dtype=torch.int64))
        _cache["st"] = st
    buf, hdl, ptrs = st
    buf.copy_(grad)
    hdl.barrier(channel=0)
    y = torch.empty_like(w)
    _ext.step(ptrs, w, grad, y, lr, dist.get_world_size())
    hdl.barrier(channel=0)
    return w + y
'''


def test_a_template_helper_called_with_a_peer_address_is_the_peer_load_of_its_caller(tmp_path):
    rec = analyze(tmp_path, "41_ddp_cuda.py", TEMPLATE_HELPER.replace("UPDATE", "w[i] -= lr * g * rsqrtf(g * g + 1e-8f);"))
    assert rec.label_values("mechanism") == ["sm_load"]
    kernels = {k.name: [lab.value for lab in k.labels["mechanism"]] for k in rec.kernels}
    assert kernels == {"reduce_update_kernel": ["sm_load"], "scale_kernel": ["none"]}  # the shared helper is not scale_kernel's
    assert "fused_kernel" in rec.label_values("overlap")


def test_a_peer_kernel_that_only_copies_is_not_fused_by_a_local_kernel_sharing_its_helper(tmp_path):
    rec = analyze(tmp_path, "41_ddp_cuda.py", TEMPLATE_HELPER.replace("UPDATE", "w[i] = g;"))
    assert rec.label_values("mechanism") == ["sm_load"]
    assert "fused_kernel" not in rec.label_values("overlap")


def test_a_volatile_word_stored_through_a_peer_flag_pointer_is_a_flag_not_sm_store(tmp_path):
    # Gemini's 44_fused_adam: `volatile int* peer_flag_ptr = (volatile int*)flag_ptrs[p];
    # peer_flag_ptr[slot] = step;` then the peers pull the payload: the push is a signal
    kernel = """__global__ void gather_peers_kernel(const long long* peer_ptrs, char* out, int64_t shard_bytes, int world_size,
                                    const long long* flag_ptrs, int my_rank, int step) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        __threadfence_system();
        for (int p = 0; p < world_size; ++p) {
            volatile int* peer_flag_ptr = reinterpret_cast<volatile int*>(flag_ptrs[p]);
            peer_flag_ptr[my_rank] = step;
        }
    }
    int rank = blockIdx.y;"""
    src = PULL_BY_BLOCK_ROW.replace("""__global__ void gather_peers_kernel(const long long* peer_ptrs, char* out, int64_t shard_bytes, int world_size) {
    int rank = blockIdx.y;""", kernel)
    src = src.replace("(char*)out.data_ptr(), shard_bytes, world_size);",
                      "(char*)out.data_ptr(), shard_bytes, world_size,\n        (const long long*)flags.data_ptr<int64_t>(), 0, 1);")
    src = src.replace("void launch_gather(torch::Tensor ptrs,", "void launch_gather(torch::Tensor flags, torch::Tensor ptrs,")
    src = src.replace("_ext.launch_gather(ptrs,", "_ext.launch_gather(ptrs, ptrs,")
    assert "peer_flag_ptr[my_rank] = step;" in src and "flags.data_ptr" in src
    rec = analyze(tmp_path, "2_allgather_cuda.py", src)
    assert rec.label_values("mechanism") == ["sm_load"]
    assert "device_flags" in rec.label_values("sync")
    # the same volatile store through a pointer not named as a flag stays a peer store
    plain = src.replace("peer_flag_ptr", "peer_out_ptr")
    assert sorted(analyze(tmp_path, "2_allgather_cuda.py", plain).label_values("mechanism")) == ["sm_load", "sm_store"]
