"""The Python pass on small candidates written for the purpose."""

import textwrap

from analyzer.python_pass import analyze_python


def facts(src: str):
    return analyze_python(textwrap.dedent(src), "cand.py")


CACHED = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

HEADER = r"""
#include <cuda_runtime.h>
"""
KERNEL = r"""
__global__ void add_peer(const float* remote, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += remote[i];
}
void launch(long remote, torch::Tensor out) {}
"""
CUDA_SRC = HEADER + KERNEL

_ext = None
_state = {}

def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="addp", cpp_sources="", cuda_sources=CUDA_SRC, functions=["launch"])
    return _ext

def _buffers(t):
    key = (t.numel(), t.dtype)
    if key in _state:
        return _state[key]
    buf = symm_mem.empty(t.numel(), device=t.device, dtype=t.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    _state[key] = (buf, hdl)
    return _state[key]

def solution(tensor):
    buf, hdl = _buffers(tensor)
    rank = dist.get_rank()
    buf.copy_(tensor)
    hdl.barrier(channel=0)
    out = tensor.clone()
    for p in range(dist.get_world_size()):
        if p != rank:
            _get_ext().launch(hdl.buffer_ptrs[p], out)
    hdl.barrier(channel=0)
    torch.cuda.synchronize()
    return out
'''


def test_cuda_source_found_through_concatenation_with_file_lines():
    f = facts(CACHED)
    assert len(f.cuda_sources) == 1
    src = f.cuda_sources[0]
    assert src.origin == "load_inline.cuda_sources"
    assert src.functions == ["launch"]
    assert "__global__ void add_peer" in src.text
    lines = CACHED.splitlines()
    # The line of the kernel in the CUDA text maps to the same text in the Python file.
    text_lines = src.text.splitlines()
    k = next(i for i, t in enumerate(text_lines) if "__global__" in t)
    assert "__global__ void add_peer" in lines[src.line_map[k] - 1]
    inc = next(i for i, t in enumerate(text_lines) if "#include" in t)
    assert "#include <cuda_runtime.h>" in lines[src.line_map[inc] - 1]


def test_paths_timed_setup_and_cached_branches():
    f = facts(CACHED)
    by = {(c.qualname, c.line): c for c in f.calls}
    paths = {q: c.path for (q, _), c in by.items()}
    assert paths["torch.utils.cpp_extension.load_inline"] == "setup"
    assert paths["torch.distributed._symmetric_memory.empty"] == "setup"
    assert paths["torch.distributed._symmetric_memory.rendezvous"] == "setup"
    assert paths["handle.barrier"] == "timed"
    assert paths["torch.cuda.synchronize"] == "timed"
    assert paths["ext.launch"] == "timed"


def test_peer_pointer_reaches_extension_argument():
    f = facts(CACHED)
    launch = next(c for c in f.calls if c.category == "ext_kernel")
    assert launch.target == "launch"
    assert launch.args[0].pointer_kind == "peer_ptr"
    assert f.ext_arg_kinds["launch"][0] == "peer_ptr"


def test_own_rank_buffer_is_not_a_peer():
    f = facts('''
        import torch.distributed as dist
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="a", cpp_sources="", cuda_sources="", functions=["k"])
        def solution(x):
            rank = dist.get_rank()
            local = hdl.buffer_ptrs[rank]
            remote = hdl.buffer_ptrs[(rank + 1) % dist.get_world_size()]
            ext.k(local, remote)
    ''')
    call = next(c for c in f.calls if c.category == "ext_kernel")
    kinds = [a.pointer_kind for a in call.args]
    assert kinds == ["symm_local", "peer_ptr"]


def test_a_neighbour_address_chosen_by_a_conditional_expression_is_a_peer():
    # `int(hdl.buffer_ptrs[rank - 1]) if rank > 0 else 0`: the edge rank passes a null the kernel
    # skips; every other rank passes its neighbour's buffer. A local address either way stays local.
    f = facts('''
        import torch.distributed as dist
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="a", cpp_sources="", cuda_sources="", functions=["k"])
        def solution(x):
            rank = dist.get_rank()
            prev_ptr = int(hdl.buffer_ptrs[rank - 1]) if rank > 0 else 0
            own = int(hdl.buffer_ptrs[rank]) if rank > 0 else 0
            ext.k(prev_ptr, own)
    ''')
    call = next(c for c in f.calls if c.category == "ext_kernel")
    assert [a.pointer_kind for a in call.args] == ["peer_ptr", "symm_local"]


def test_peer_addresses_unpacked_from_a_helper_that_returns_its_cache_entry_first():
    # `if key in _cache: return _cache[key]` before `res = (buf, hdl, ptrs); _cache[key] = res;
    # return res`: both returns are the same tuple, so the unpacked `ptrs` holds peer addresses.
    f = facts('''
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="a", cpp_sources="", cuda_sources="", functions=["k"])
        _cache = {}
        def _state(n, device):
            key = (n, device)
            if key in _cache:
                return _cache[key]
            buf = symm_mem.empty(n, device=device)
            hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
            ptrs = torch.tensor(hdl.buffer_ptrs, device=device, dtype=torch.int64)
            res = (buf, hdl, ptrs)
            _cache[key] = res
            return res
        def solution(x):
            buf, hdl, ptrs = _state(x.numel(), x.device)
            ext.k(ptrs, buf)
    ''')
    call = next(c for c in f.calls if c.category == "ext_kernel")
    assert [a.pointer_kind for a in call.args] == ["peer_ptr_array", "symm_local"]


def test_uncached_setup_is_timed():
    f = facts('''
        import torch.distributed._symmetric_memory as symm_mem
        from torch.utils.cpp_extension import load_inline
        def solution(x):
            ext = load_inline(name="a", cpp_sources="", cuda_sources="__global__ void k(){}", functions=["f"])
            buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
            hdl = symm_mem.rendezvous(buf, "0")
            return x
    ''')
    assert {c.path for c in f.calls if c.category in ("compile", "symm_mem")} == {"timed"}


def test_rank_conditional_barrier_and_module_level():
    f = facts('''
        import torch.distributed as dist
        dist.barrier()
        def solution(x):
            if dist.get_rank() == 0:
                dist.barrier()
            return x
        def unused():
            dist.all_reduce(x)
    ''')
    bars = [c for c in f.calls if c.qualname == "torch.distributed.barrier"]
    assert [b.path for b in bars] == ["module", "timed"]
    assert bars[1].rank_conditional and not bars[0].rank_conditional
    ar = next(c for c in f.calls if c.qualname == "torch.distributed.all_reduce")
    assert ar.path == "unreached"


def test_fstring_source_and_raw_kernel():
    f = facts('''
        import cupy
        BLOCK = 256
        src = f"""
        #define BLOCK {BLOCK}
        extern "C" __global__ void k(float* p) {{ p[threadIdx.x] = 0; }}
        """
        kern = cupy.RawKernel(src, "k")
        def solution(x):
            kern((1,), (BLOCK,), (x.data_ptr(),))
            return x
    ''')
    assert len(f.cuda_sources) == 1
    s = f.cuda_sources[0]
    assert s.origin == "cupy.RawKernel" and "#define BLOCK 256" in s.text and "{ p[" in s.text
    launch = next(c for c in f.calls if c.category == "cupy_launch")
    assert launch.target == "k" and launch.path == "timed"


def test_triton_kernel_peer_loads():
    f = facts('''
        import triton
        import triton.language as tl
        @triton.jit
        def gather(ptrs, out, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            src = tl.load(ptrs + 1).to(tl.pointer_type(tl.float32))
            v = tl.load(src + offs, mask=offs < n)
            tl.store(out + offs, v, mask=offs < n)
        def solution(x):
            gather[(1,)](hdl.buffer_ptrs_dev, x, x.numel(), BLOCK=128)
            return x
    ''')
    (k,) = f.triton_kernels
    assert k.peer_params["ptrs"] == "peer_ptr_array"
    assert k.peer_loads and len(k.peer_loads) == 1
    assert not k.peer_stores


def test_asserts_and_hard_coded_world_size():
    f = facts('''
        import torch, torch.distributed as dist
        WORLD_SIZE = 8
        def solution(x):
            assert dist.get_world_size() == 2
            assert x.dtype == torch.float32
            assert x.numel() % 1024 == 0
            assert x.shape == (4096, 128)
            assert x.shape == (B, T, H)          # inputs agree with each other: no fixed size
            peer = 1 - dist.get_rank()
            return x
    ''')
    kinds = sorted((a.kind, a.literal) for a in f.asserts)
    assert kinds == [("dtype", "torch.float32"), ("shape", ""), ("shape", "1024"), ("world_size", "2")]
    assert {c.name for c in f.constants} == {"WORLD_SIZE", "peer"}


def test_syntax_error_is_a_status_not_an_exception():
    f = analyze_python("def solution(:\n", "bad.py")
    assert f.status == "failed" and "line 1" in f.message


def test_a_table_of_the_inputs_addresses_is_local_and_of_peers_addresses_peer():
    f = facts('''
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["scale", "pull", "one"])

def solution(grads, hdl):
    ptrs = []
    for g in grads:
        ptrs.append(g.data_ptr())
    peers = []
    for r in range(hdl.world_size):
        peers.append(hdl.buffer_ptrs[r])
    ext.scale(torch.tensor(ptrs, dtype=torch.int64, device="cuda").data_ptr(), len(grads))
    ext.pull(torch.tensor(peers, dtype=torch.int64, device="cuda").data_ptr())
    ext.one(peers[1])
    return grads
''')
    assert f.ext_arg_kinds["scale"][0] == "local"
    # a list the peers' addresses are appended to is a table of them (a kernel indexes it by
    # peer and loads the address locally); one of its entries is a peer's address
    assert f.ext_arg_kinds["pull"][0] == "peer_ptr_array"
    assert f.ext_arg_kinds["one"][0] == "peer_ptr"


def test_a_comprehension_over_the_inputs_addresses_is_local():
    f = facts('''
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["scale", "pull", "other"])

def solution(grads, hdl, n):
    ext.scale(torch.tensor([g.data_ptr() for g in grads], dtype=torch.int64, device="cuda"), n)
    ext.pull(torch.tensor([hdl.buffer_ptrs[r] for r in range(n)], dtype=torch.int64, device="cuda"))
    made = [torch.empty(4) for _ in range(n)]
    ext.other(torch.tensor([m.data_ptr() for m in made], dtype=torch.int64, device="cuda"))
    return grads
''')
    assert f.ext_arg_kinds["scale"][0] == "local"
    assert f.ext_arg_kinds["pull"][0] in ("peer_ptr", "peer_ptr_array")
    # a list the function built itself may hold anything: not judged
    assert f.ext_arg_kinds["other"][0] == "unknown"


def test_int_of_an_element_of_a_tensor_input_is_a_host_sync():
    f = facts('''
import torch
from typing import List

def solution(x: torch.Tensor, ranges: torch.Tensor, sizes: List[int], n: int):
    start = int(ranges[0, 0])
    width = int(sizes[0])
    count = int(n)
    host = ranges.cpu()
    end = int(host[0, 1])
    return x[start:end]
''')
    syncs = [(c.line, c.qualname) for c in f.calls if c.category == "cuda_sync"]
    assert syncs == [(6, "tensor.__int__")]


def test_a_comprehension_over_a_handles_table_and_an_autograd_apply_carry_peer_addresses():
    f = facts('''
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["push"])

class Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ptrs):
        ext.push(x, ptrs)
        return x

def solution(x, hdl):
    state = {"ptrs": [int(p) for p in hdl.buffer_ptrs]}
    return Exchange.apply(x, state["ptrs"])
''')
    assert f.ext_arg_kinds["push"][1] == "peer_ptr_array"


WRAPPED_PEER = '''
    import torch
    import triton
    import triton.language as tl
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    @triton.jit
    def scatter_tile(x_ptr, dst0, dst1, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(dst0 + offs, v * 2.0, mask=offs < n)
        tl.store(dst1 + offs, v * 2.0, mask=offs < n)
    def solution(x, out):
        hdl = symm_mem.rendezvous(out, dist.group.WORLD)
        views = []
        for i in range(2):
            ptr = int(hdl.buffer_ptrs[i])
            views.append(ext.WRAP(ptr, out, out.shape, out.stride()))
        scatter_tile[(4,)](x, views[0], views[1], x.numel(), BLOCK=128)
        return out
'''


def test_a_peer_address_wrapped_as_a_tensor_carries_triton_stores_to_the_peer():
    f = facts(WRAPPED_PEER.replace("WRAP", "create_tensor_from_ptr"))
    (k,) = f.triton_kernels
    assert k.peer_params.get("dst0") == "peer_tensor" and len(k.peer_stores) == 2


def test_an_unrelated_helper_fed_the_address_is_not_a_peer_view():
    f = facts(WRAPPED_PEER.replace("WRAP", "checksum"))
    (k,) = f.triton_kernels
    assert not k.peer_stores


REBOUND_TO_HOST = '''
    import torch
    import torch.distributed as dist
    def solution(mask):
        counts = mask.sum(dim=(1, 2))
        gathered = torch.empty(8 * counts.numel(), dtype=counts.dtype, device=counts.device)
        dist.all_gather_into_tensor(gathered, counts)
        per_expert = gathered.view(8, -1)[:, :2].contiguous()
        FIRST
        SECOND
        return splits, per_expert
'''


def _tolist_syncs(src: str) -> list[int]:
    f = facts(src)
    return [c.line for c in f.calls if c.qualname.endswith("tolist") and c.category in ("cuda_sync", "host_sync")]


def test_a_device_tensor_read_back_before_its_name_is_rebound_to_a_host_copy_syncs():
    src = REBOUND_TO_HOST.replace("FIRST", "splits = per_expert.sum(dim=1).tolist()").replace(
        "SECOND", 'per_expert = per_expert.to("cpu", non_blocking=True)')
    assert len(_tolist_syncs(src)) == 1


def test_the_same_read_after_the_host_copy_does_not():
    src = REBOUND_TO_HOST.replace("FIRST", 'per_expert = per_expert.to("cpu")').replace(
        "SECOND", "splits = per_expert.sum(dim=1).tolist()")
    assert _tolist_syncs(src) == []
