"""The Python pass judged against PKB's run: branches it does not take, set-up behind a cache read
into a local, calls reached through attributes, host syncs that are not, and the facts behind
PKB018 and PKB019. Small candidates written for the purpose."""

from static_helpers import RUN, facts, paths

from analyzer.python_pass import RunContext, run_context



def test_run_context_from_the_tree_tokens():
    assert run_context("bf16", "h100_8") == RUN
    assert run_context("fp32", "h100_8").dtype == "float32"
    assert run_context("", "") == RunContext()


BRANCHES = '''
import torch
import torch.distributed as dist
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["mc_allreduce", "uva_allreduce"])

def solution(x, hdl):
    world = dist.get_world_size()
    if world == 1:
        return x.clone()
    if x.dtype == torch.float32:
        dist.all_reduce(x)                      # float32 fallback
        return x
    if hdl.multicast_ptr != 0 and x.numel() % 8 == 0:
        ext.mc_allreduce(hdl.multicast_ptr, x)  # the run's path
        return x
    ext.uva_allreduce(hdl.buffer_ptrs_dev, x)   # multicast missing
    return x
'''


def test_branches_the_run_does_not_take_are_fallback():
    f = facts(BRANCHES)
    assert paths(f, "all_reduce") == ["fallback"]
    assert paths(f, "ext.mc_allreduce") == ["timed"]
    assert paths(f, "ext.uva_allreduce") == ["fallback"]


def test_unknown_run_keeps_dtype_and_multicast_branches_but_not_world_size_one():
    f = facts(BRANCHES, run=RunContext())
    assert paths(f, "all_reduce") == ["timed"]
    assert paths(f, "ext.uva_allreduce") == ["timed"]
    # a single rank is never the run of a multi-GPU benchmark, whatever the tree
    assert facts('''
        import torch.distributed as dist
        def solution(x):
            if dist.get_world_size() == 1:
                dist.barrier()
            return x
    ''', run=RunContext()).calls[0].path == "fallback"


def test_integer_dtypes_are_not_judged_against_the_run_precision():
    f = facts('''
        import torch
        def solution(idx, x):
            if idx.dtype == torch.int64:
                torch.cuda.synchronize()
            return x
    ''')
    assert paths(f, "torch.cuda.synchronize") == ["timed"]


CACHE_LOCAL = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_resource_cache = {}

def _resources(t):
    key = (t.shape, t.dtype)
    cached = _resource_cache.get(key)
    if cached is not None:
        return cached
    buf = symm_mem.empty(t.shape, device=t.device, dtype=t.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    cached = (buf, hdl)
    _resource_cache[key] = cached
    return cached

def solution(t):
    buf, hdl = _resources(t)
    hdl.barrier(channel=0)
    return t
'''


def test_cache_read_into_a_local_guards_setup():
    f = facts(CACHE_LOCAL)
    assert paths(f, "_symmetric_memory.empty") == ["setup"]
    assert paths(f, "_symmetric_memory.rendezvous") == ["setup"]
    assert paths(f, "handle.barrier") == ["timed"]


def test_a_local_not_read_from_a_cache_is_no_guard():
    f = facts('''
        import torch.distributed._symmetric_memory as symm_mem
        def solution(t):
            buf = None
            if buf is None:
                buf = symm_mem.empty(t.numel(), device=t.device, dtype=t.dtype)
            return buf
    ''')
    assert paths(f, "_symmetric_memory.empty") == ["timed"]


def test_growing_a_cache_entry_read_into_a_local_is_setup():
    # `st = _cache[g]`, then `if need > st["buf"].numel(): st["buf"] = bigger`: the entry grows
    # when the inputs outgrow it, not on every call
    grow = '''
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
        _cache = {}
        def solution(t, group=None):
            if group not in _cache:
                buf = symm_mem.empty(1 << 20, device=t.device, dtype=torch.uint8)
                _cache[group] = {"buf": buf, "hdl": symm_mem.rendezvous(buf, group)}
            st = _cache[group]
            need = t.numel() * t.element_size()
            if need > st["buf"].numel():
                buf = symm_mem.empty(2 * need, device=t.device, dtype=torch.uint8)
                st["buf"] = buf
                st["hdl"] = symm_mem.rendezvous(buf, group)
            st["hdl"].barrier(channel=0)
            return t
    '''
    f = facts(grow)
    assert paths(f, "_symmetric_memory.empty") == ["setup", "setup"]
    assert paths(f, "_symmetric_memory.rendezvous") == ["setup", "setup"]
    # a local not read from the cache, stored into, guards nothing
    fresh = grow.replace("st = _cache[group]", "st = {\"buf\": torch.empty(0)}")
    assert paths(facts(fresh), "_symmetric_memory.empty") == ["setup", "timed"]


def test_a_local_flag_comparing_the_input_with_cached_capacities_guards_setup():
    # `needs_realloc = (counts > _caps).any().item() or D != _cur_D; if needs_realloc:` (Gemini 68):
    # the buffers are made again only when the inputs outgrow what the module keeps
    grow = '''
        import torch
        import torch.distributed._symmetric_memory as symm_mem
        _caps = None
        _cur_D = None
        _bufs = {}
        def solution(counts, value, group=None):
            global _caps, _cur_D
            D = value.shape[1]
            if _caps is None:
                _caps = torch.zeros_like(counts)
            over = (counts > _caps).any()
            needs_realloc = over.item() or (D != _cur_D)
            if needs_realloc:
                _caps.copy_(torch.maximum(_caps, counts))
                _cur_D = D
                buf = symm_mem.empty(int(_caps.max()) * D, device=value.device, dtype=value.dtype)
                _bufs["val"] = (buf, symm_mem.rendezvous(buf, group))
            return _bufs["val"][0]
    '''
    f = facts(grow)
    assert paths(f, "_symmetric_memory.empty") == ["setup"]
    assert paths(f, "_symmetric_memory.rendezvous") == ["setup"]
    # a flag computed from the call's inputs alone guards nothing kept between calls
    local = grow.replace("over = (counts > _caps).any()", "over = (counts > 0).any()").replace(" or (D != _cur_D)", "")
    assert paths(facts(local), "_symmetric_memory.empty") == ["timed"]


def test_calls_followed_through_autograd_apply_self_and_instances():
    f = facts('''
        import torch
        import torch.distributed as dist

        class _AllReduce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                dist.all_reduce(x)
                return x

        class Runner:
            def __init__(self):
                self.ready = True
            def step(self, x):
                return self._push(x)
            def _push(self, x):
                torch.cuda.synchronize()
                return x
            def __call__(self, x):
                dist.broadcast(x, 0)
                return x

        _runner = Runner()

        def solution(x):
            y = _AllReduce.apply(x)
            _runner.step(y)
            return _runner(y)
    ''')
    assert paths(f, "all_reduce") == ["timed"]
    assert paths(f, "torch.cuda.synchronize") == ["timed"]
    assert paths(f, "broadcast") == ["timed"]


def test_host_tensors_and_metadata_copies():
    f = facts('''
        import torch
        def solution(x, splits):
            order = torch.arange(8)
            first = order.tolist()              # CPU tensor: no sync
            n = torch.tensor([1, 2]).sum().item()
            counts = splits.cpu()               # a few numbers: a sync, not staging
            sizes = x.sum(dim=1).cpu().tolist()
            payload = x.cpu()                   # the payload crosses host memory
            total = x.sum().item()              # a GPU scalar: a sync
            order_t = torch.arange(8).reshape(2, 4).T.ravel().tolist()
            first_count = counts[0].item()      # read from the host copy
            return payload
    ''')
    cats = {(c.line, c.qualname): c.category for c in f.calls if c.category in ("cuda_sync", "host_transfer")}
    assert (5, "tensor.tolist") not in cats
    assert (6, "tensor.item") not in cats
    assert cats[(7, "tensor.cpu")] == "cuda_sync"
    assert cats[(8, "tensor.cpu")] == "cuda_sync"
    assert (8, "tensor.tolist") not in cats
    assert cats[(9, "tensor.cpu")] == "host_transfer"
    assert cats[(10, "tensor.item")] == "cuda_sync"
    assert (11, "tensor.tolist") not in cats and (12, "tensor.item") not in cats


def test_a_non_blocking_copy_of_metadata_is_no_sync():
    # `.to("cpu", non_blocking=True)` copies into pinned memory and returns at once: the host
    # waits at the synchronize after it, which is the sync (four such copies in a row were four
    # false PKB008 findings on a real MoE preprocessing file)
    f = facts('''
        import torch
        def solution(x, splits):
            in_cpu = splits.to("cpu", non_blocking=True)
            counts_cpu = splits.sum(dim=0).to("cpu")
            torch.cuda.current_stream().synchronize()
            payload = x.to("cpu", non_blocking=True)
            return in_cpu.tolist(), counts_cpu.tolist(), payload
    ''')
    cats = {(c.line, c.qualname): c.category for c in f.calls if c.category in ("cuda_sync", "host_transfer")}
    assert (4, "tensor.to(cpu)") not in cats
    assert cats[(5, "tensor.to(cpu)")] == "cuda_sync"
    assert cats[(6, "torch.cuda.current_stream().synchronize")] == "cuda_sync"
    assert cats[(7, "tensor.to(cpu)")] == "host_transfer"  # the payload still crosses host memory


def test_host_copies_followed_into_helpers_derived_tensors_and_returns():
    f = facts('''
        import torch
        def plan(rank, counts_cpu, gpu_counts):
            offsets = torch.zeros_like(counts_cpu)
            offsets[1:] = counts_cpu.cumsum(0)[:-1]
            a = counts_cpu[rank].item()         # parameter fed a host copy: no sync
            b = offsets[rank].item()            # derived from it: no sync
            c = gpu_counts[rank].item()         # fed a GPU tensor: a sync
            return a + b + c
        def split(x):
            per_rank = x.sum(dim=1).to(torch.device("cpu"), non_blocking=True)
            return x, per_rank
        def solution(x, counts):
            y, per_rank = split(x)
            sizes = per_rank.tolist()           # returned host copy: no sync
            return plan(0, counts.cpu(), counts) + len(sizes)
    ''')
    syncs = {c.line for c in f.calls if c.category == "cuda_sync" and c.qualname in ("tensor.item", "tensor.tolist")}
    assert syncs == {8}


def test_torch_functions_of_host_tensors_make_host_tensors():
    f = facts('''
        import torch
        def solution(x, sizes):
            c_off = torch.cumsum(torch.tensor(sizes, dtype=torch.int32), dim=0).tolist()   # CPU: no sync
            both = torch.cat([torch.tensor(sizes), torch.arange(4)]).tolist()             # CPU: no sync
            g_off = torch.cumsum(x.sum(dim=1), dim=0).tolist()                           # GPU: a sync
            moved = torch.cumsum(torch.tensor(sizes).cuda(), dim=0).tolist()             # sent to the GPU
            return x
    ''')
    syncs = {c.line for c in f.calls if c.category == "cuda_sync" and c.qualname == "tensor.tolist"}
    assert syncs == {6, 7}


def test_extension_function_named_like_a_handle_method_is_the_extensions():
    f = facts('''
        import torch.distributed._symmetric_memory as symm_mem
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["wait_signal", "push"])
        def solution(x):
            hdl = symm_mem.rendezvous(x, "0")
            ext.wait_signal(x)
            hdl.wait_signal(0)
            return x
    ''')
    by_line = {c.line: c.qualname for c in f.calls if "wait_signal" in c.qualname}
    assert by_line == {7: "ext.wait_signal", 8: "handle.wait_signal"}


def test_world_size_literals_and_peer_loops():
    f = facts('''
        import torch.distributed as dist
        def solution(x, hdl):
            world = dist.get_world_size()
            assert x.numel() % world == 0
            assert dist.get_world_size() == 8
            for s in range(2):                  # double buffer
                hdl.get_buffer(hdl.rank, (4,), x.dtype, s * 4)
            for p in range(8):                  # one iteration per peer
                ext.pull(hdl.buffer_ptrs[p], x)
            return x
    ''')
    assert [(a.line, a.literal) for a in f.asserts if a.kind == "world_size"] == [(6, "8")]
    assert [(c.line, c.value) for c in f.constants if c.name == "range"] == [(9, "8")]


def test_binding_signatures_and_integer_arguments():
    f = facts('''
        import torch
        from torch.utils.cpp_extension import load_inline
        SRC = r"""
        void run(torch::Tensor sig, torch::Tensor out, int64_t mc) {}
        """
        ext = load_inline(name="e", cpp_sources="", cuda_sources=SRC, functions=["run"])
        def solution(x, hdl):
            mc = hdl.multicast_ptr
            ext.run(hdl.signal_pad_ptrs_dev, x, mc)
            return x
    ''')
    assert f.ext_signatures["run"] == ["torch::Tensor", "torch::Tensor", "int64_t"]
    call = next(c for c in f.calls if c.qualname == "ext.run")
    assert [a.value_type for a in call.args if a.position >= 0] == ["int", "", "int"]


def test_returned_buffers_that_outlive_the_call():
    def returning(expr):
        return facts(CACHE_LOCAL.replace("    return t\n", f"    return {expr}\n")).reused_returns

    kept = returning("buf.view(-1)[: t.numel()]")
    assert [(r.line, r.name, r.reason) for r in kept] == [(22, "buf", "symmetric")]
    assert returning("buf.clone()") == []
    assert returning("torch.empty_like(t)") == []


def test_returned_views_through_a_split_helper_a_rebinding_or_a_parallel_tensors_data():
    def returning(body):
        return [r.name for r in facts(CACHE_LOCAL.replace("    return t\n", body)).reused_returns]

    # `_unflatten_dense_tensors(flat, like)` returns views of `flat`, spread into the tuple
    assert returning("    views = _unflatten_dense_tensors(buf, [t])\n    return (*views, t)\n") == ["views"]
    # a name rebound to a view of itself is still the buffer
    assert returning("    y = buf.view(-1)[: t.numel()]\n    y = y.reshape(t.shape)\n    return y\n") == ["y"]
    assert returning("    y = buf.clone()\n    y = y.reshape(t.shape)\n    return y\n") == []
    # PKB's ParallelKittens runtime keeps each parallel tensor it hands out
    tk = "    y_tk = get_or_create_parallel_tensor(ext, (8,), torch.bfloat16, multicast=True)\n" \
         "    return y_tk.data_.view(-1)[:4]\n"
    assert returning(tk) == ["y_tk"]


def test_a_group_parameter_left_at_none_is_none_on_the_run():
    f = facts('''
        import torch.distributed as dist
        def solution(x, group=None):
            if group is None:
                return x
            dist.all_to_all_single(x, x, group=group)
            return x
    ''')
    assert paths(f, "all_to_all_single") == ["fallback"]
    rebound = facts('''
        import torch.distributed as dist
        def solution(x, group=None):
            group = group or dist.group.WORLD
            if group is None:
                return x
            dist.all_to_all_single(x, x, group=group)
            return x
    ''')
    assert paths(rebound, "all_to_all_single") == ["timed"]


def test_initialised_process_group_and_a_cache_filled_by_a_helper():
    f = facts('''
        import torch
        import torch.distributed as dist
        from torch.utils.cpp_extension import load_inline
        _ext = None

        def _get_ext():
            global _ext
            _ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["run"])
            return _ext

        def solution(x):
            if not dist.is_initialized() or dist.get_world_size() == 1:
                torch.cuda.synchronize()
                return x
            if _ext is None:
                if dist.get_rank() == 0:
                    _get_ext()
                dist.barrier()
            return x
    ''')
    assert paths(f, "torch.cuda.synchronize") == ["fallback"]
    assert paths(f, "torch.distributed.barrier") == ["setup"]


def test_metadata_collectives_and_cpu_copies_read_back_as_numbers():
    from analyzer.python_pass import is_metadata_collective

    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(x, counts):
            all_counts = torch.empty(8, dtype=torch.int64, device=x.device)
            dist.all_gather_into_tensor(all_counts, counts)
            dist.all_reduce(x)
            host = all_counts.cpu()
            n = int(host[0].item())
            return x
    ''')
    by_name = {c.qualname.split(".")[-1]: c for c in f.calls}
    assert is_metadata_collective(by_name["all_gather_into_tensor"])
    assert not is_metadata_collective(by_name["all_reduce"])
    assert by_name["cpu"].category == "cuda_sync"


def test_an_object_gather_of_shapes_is_metadata_but_a_reshaped_payload_is_not():
    from analyzer.python_pass import is_metadata_collective
    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(x, weights):
            local_shape = [int(t.shape[0]) for t in weights]
            shape_list = [None] * 8
            dist.all_gather_object(shape_list, local_shape)
            x_reshaped = x.view(-1)
            dist.all_reduce(x_reshaped)
            return x
    ''')
    by_name = {c.qualname.split(".")[-1]: c for c in f.calls}
    assert is_metadata_collective(by_name["all_gather_object"])
    assert not is_metadata_collective(by_name["all_reduce"])


def test_untaken_conditional_expression_and_size_one_shortcut_through_a_local():
    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(x, input_splits, group=None):
            group = group or dist.group.WORLD
            W = dist.get_world_size(group)
            a = input_splits.tolist() if isinstance(input_splits, torch.Tensor) else input_splits
            b = x.amax().item() if isinstance(input_splits, list) else 0
            if W == 1:
                return x * x.sum().item()
            return x * x.max().item()
    ''')
    by_line = {c.line: c.path for c in f.calls if c.qualname == "tensor.item" or c.qualname == "tensor.tolist"}
    assert by_line == {7: "fallback", 8: "timed", 10: "fallback", 11: "timed"}


def test_a_branch_switched_off_by_a_constant_never_runs():
    # `int(t.cpu()[r].item()) if False else sum(...)` (a GPT-5.5 file) and `if 0:` blocks: the
    # author disabled the branch, so its host syncs are not on the run
    f = facts('''
        import torch
        def solution(x, counts):
            off = int(counts.cpu()[0].item()) if False else 3
            if 0:
                x.sum().item()
            if True:
                x.max().item()
            return x
    ''')
    by_line = {c.line: c.path for c in f.calls if c.qualname in ("tensor.item", "tensor.cpu")}
    assert by_line == {4: "fallback", 6: "fallback", 8: "timed"}


def test_grad_mode_is_on_in_pkbs_run_unless_the_candidate_turns_it_off():
    # PKB's worker calls solution() with grad mode on (GPT-5.5 51 branches on it): the no-grad
    # path is the fallback, unless solution(), the testing helper or a `with` block turns grad off
    f = facts('''
        import torch
        def solution(x):
            if torch.is_grad_enabled():
                return x * x.sum().item()
            return x * x.max().item()
    ''')
    assert {c.line: c.path for c in f.calls if c.qualname == "tensor.item"} == {5: "timed", 6: "fallback"}
    f = facts('''
        import torch
        @torch.no_grad()
        def solution(x):
            if torch.is_grad_enabled():
                return x * x.sum().item()
            return x * x.max().item()
    ''')
    assert {c.line: c.path for c in f.calls if c.qualname == "tensor.item"} == {6: "fallback", 7: "timed"}
    f = facts('''
        import torch
        def solution(x):
            with torch.inference_mode():
                if not torch.is_grad_enabled():
                    return x * x.sum().item()
            return x * x.max().item()
    ''')
    assert {c.line: c.path for c in f.calls if c.qualname == "tensor.item"}[6] == "timed"  # grad is off there


def test_world_size_of_the_whole_world_group_is_the_runs():
    # `group = group or dist.group.WORLD` with solution()'s group left at None: W is the run's 8,
    # so a library path for other sizes is a fallback (175 files of the corpus bind the group so)
    src = '''
        import torch
        import torch.distributed as dist
        def solution(x, group=None):
            group = group or dist.group.WORLD
            W = dist.get_world_size(group)
            if W != 8 or x.numel() % W != 0:
                dist.all_reduce(x, group=group)
                return x
            return x * 2
    '''
    assert paths(facts(src), "all_reduce") == ["fallback"]
    # a group the run passes (its input factory fills it): W may be a subgroup's, undecided
    filled = facts(src, RunContext(dtype="bfloat16", world_size=8, multicast=True, group_args=("group",)))
    assert paths(filled, "all_reduce") == ["timed"]
    # a tree that does not give the world size decides nothing
    assert paths(facts(src, RunContext(dtype="bfloat16")), "all_reduce") == ["timed"]


def test_empty_input_list_branch_never_runs():
    f = facts('''
        import torch
        from typing import List
        def solution(grad_tensors: List[torch.Tensor], max_norm: float, scales=None):
            valid = [t for t in grad_tensors if t is not None]
            big = [t for t in grad_tensors if t.numel() > 1024]
            if not valid:
                torch.cuda.synchronize()
                return torch.zeros(())
            if not big:
                torch.cuda.current_stream().synchronize()
            return torch.stack([t.norm() for t in valid]).norm()
    ''')
    assert paths(f, "torch.cuda.synchronize") == ["fallback"]
    assert paths(f, "current_stream().synchronize") == ["timed"]  # a size filter may leave it empty


def test_size_at_least_the_world_size_holds_on_the_run():
    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(x):
            world_size = dist.get_world_size()
            n = x.numel()
            use_mm = (n % world_size == 0) and (n >= world_size)
            if use_mm:
                torch.cuda.synchronize()
            else:
                dist.barrier()
            if n < world_size:
                x.sum().item()
            return x
    ''')
    assert paths(f, "torch.cuda.synchronize") == ["timed"]
    assert paths(f, "barrier") == ["fallback"]
    assert paths(f, "tensor.item") == ["fallback"]


def test_size_at_least_a_few_elements_per_rank_holds_on_the_run():
    f = facts('''
        import torch
        import torch.distributed as dist
        BYTES_PER_THREAD = 16
        def solution(x):
            world_size = dist.get_world_size()
            n = x.numel()
            per_thread = BYTES_PER_THREAD // 2
            if n >= per_thread * world_size:
                torch.cuda.synchronize()
            if n < world_size * 4:
                dist.barrier()
            if n >= x.shape[0] * world_size:
                x.sum().item()
            if n < 256 * world_size:
                torch.cuda.current_stream().synchronize()
            return x
    ''')
    assert paths(f, "torch.cuda.synchronize") == ["timed"]
    assert paths(f, "barrier") == ["fallback"]
    # a multiple that is no constant, or a large one, is not decided
    assert paths(f, "tensor.item") == ["timed"]
    assert paths(f, "current_stream().synchronize") == ["timed"]


def test_two_autograd_functions_each_reach_their_own_forward():
    f = facts('''
        import torch
        import torch.distributed as dist
        class Scatter(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                dist.barrier()
                return x * 2
        class Gather(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                torch.cuda.synchronize()
                return x + 1
        def solution(x):
            return Gather.apply(Scatter.apply(x))
    ''')
    assert paths(f, "barrier") == ["timed"]
    assert paths(f, "torch.cuda.synchronize") == ["timed"]


def test_integer_tensors_exchanged_are_metadata_whatever_their_names():
    from analyzer.python_pass import is_metadata_collective

    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(x, splits, world):
            local_in = torch.tensor(splits, dtype=torch.int64, device=x.device)
            all_in = torch.empty(world * world, dtype=torch.int64, device=x.device)
            dist.all_gather_into_tensor(all_in, local_in)
            all_in = all_in.view(world, world)
            table = torch.empty((world, world), dtype=torch.int32, device=x.device)
            dist.all_gather([table[i] for i in range(world)], local_in.int())
            out = torch.empty(world * x.numel(), dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(out, x)
            return out
    ''')
    gathers = [c for c in f.calls if c.qualname.endswith(("all_gather_into_tensor", "all_gather"))]
    assert [is_metadata_collective(c) for c in gathers] == [True, True, False]


def test_split_size_helpers_nested_fast_paths_and_function_attribute_caches():
    f = facts('''
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        def _as_list(x):
            if isinstance(x, torch.Tensor):
                return x.tolist()               # only for tensor split sizes
            return list(x)

        def solution(x, input_split_sizes, dst=0):
            splits = _as_list(input_split_sizes)
            chunk_elems = x.numel() // 8
            if chunk_elems == 0:
                torch.cuda.synchronize()
                return x
            if not hasattr(solution, "buf"):
                solution.buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
            if x.dtype == torch.bfloat16:
                if x.numel() % 8 == 0 and x.numel() > 0:
                    if dist.get_rank() == dst:
                        return x.clone()
                    else:
                        return x
            dist.reduce(x, dst)                 # not reached on the run
            return x
    ''')
    assert not [c for c in f.calls if c.qualname == "tensor.tolist" and c.path == "timed"]
    assert paths(f, "torch.cuda.synchronize") == ["fallback"]
    assert paths(f, "_symmetric_memory.empty") == ["setup"]
    assert paths(f, "torch.distributed.reduce") == ["fallback"]


def test_a_helper_called_only_from_an_untaken_conditional_expression_is_fallback():
    # `_reduce(x, grp) if grp is not None else x` with grp left at None on the run: what the
    # helper calls runs only on the branch the run skips. The same helper called plainly is timed.
    src = '''
        import torch.distributed as dist
        def _reduce(v, grp):
            dist.all_reduce(v, group=grp)
            return v
        def solution(x, fsdp_group=None):
            return _reduce(x, fsdp_group) if fsdp_group is not None else x
    '''
    assert paths(facts(src), "all_reduce") == ["fallback"]
    taken = src.replace("if fsdp_group is not None else x", "if x.is_cuda else x")
    assert paths(facts(taken), "all_reduce") == ["timed"]


def test_a_helpers_group_parameter_fed_only_unset_groups_is_none_on_the_run():
    # `_reduce(val, group)` returns early on `group is None`; solution() hands it its own group
    # parameters, which PKB's run leaves at None: the helper's reduction is a fallback
    src = '''
        import torch.distributed as dist
        def _reduce(val, group):
            if group is None:
                return val
            dist.all_reduce(val, group=group)
            return val
        def solution(x, fsdp_group=None, ep_group=None):
            x = _reduce(x, fsdp_group)
            return _reduce(x, ep_group)
    '''
    assert paths(facts(src), "all_reduce") == ["fallback"]
    # one call with a group the run does give (the default group) keeps the reduction timed
    fed = src.replace("return _reduce(x, ep_group)", "return _reduce(x, dist.group.WORLD)")
    assert paths(facts(fed), "all_reduce") == ["timed"]


def test_a_flag_cleared_only_on_a_branch_the_run_skips_keeps_its_value():
    # `use_mc = True; if not hasattr(hdl, "multicast_ptr") or n % 8 != 0: use_mc = False`: every
    # handle has the attribute and PKB's sizes are aligned, so the run takes the multicast path.
    src = '''
        import torch
        def solution(x, hdl, n):
            use_mc = True
            if not hasattr(hdl, "multicast_ptr") or n % 8 != 0:
                use_mc = False
            if use_mc:
                y = x + 1
            else:
                torch.cuda.synchronize()
            return x
    '''
    assert paths(facts(src), "synchronize") == ["fallback"]
    # cleared where the run may go (an undecided test): the flag is not known, both branches kept
    undecided = src.replace('if not hasattr(hdl, "multicast_ptr") or n % 8 != 0:', "if x.shape[0] > 3:")
    assert paths(facts(undecided), "synchronize") == ["timed"]
    # a global flag may be changed by another call: left undecided too
    shared = src.replace("use_mc = True\n", "global use_mc\n            use_mc = True\n", 1)
    assert "global use_mc" in shared and paths(facts(shared), "synchronize") == ["timed"]


def test_a_wrap_guard_on_a_call_counter_never_runs():
    # `res["epoch"] += 1` per call, re-initialised past a billion: PKB's few hundred calls never get
    # there, so the barrier behind it is not on the run (GPT-5.5's 13_gemm_allreduce)
    src = '''
        import torch
        import torch.distributed as dist
        _cache = {}
        def solution(x):
            res = _cache.setdefault("r", {"epoch": 0})
            res["epoch"] += 1
            if res["epoch"] > 1_000_000_000:
                dist.barrier()
                res["epoch"] = 1
            if (1 << 30) <= res["epoch"]:
                dist.all_reduce(x)
            if res["epoch"] < 2**31 - 1:
                x = x * x.sum().item()
            if x.numel() > 1_000_000_000:
                dist.broadcast(x, 0)
            return x
    '''
    f = facts(src)
    assert paths(f, "barrier") == ["fallback"] and paths(f, "all_reduce") == ["fallback"]
    assert paths(f, "item") == ["timed"]
    # a size is no counter: undecided, so it stays on the run
    assert paths(f, "broadcast") == ["timed"]


def test_a_problem_whose_inputs_have_a_fixed_dtype_is_judged_on_that_dtype(tmp_path):
    # problem 66's grad_output is float32 in every run tree (PKB's input factory builds it so):
    # a bf16-only fast path is the fallback and the float32 path runs, though the tree says bf16
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import read_candidate

    src = '''
import torch
import torch.distributed as dist

def solution(grad_output, seed_inverse_ids, seed_size, counts_sent, counts_received, group=None):
    if grad_output.dtype != torch.bfloat16:
        out = torch.empty_like(grad_output)
        dist.all_to_all_single(out, grad_output)
        return torch.zeros_like(out).index_add_(0, seed_inverse_ids, out)
    out = torch.empty_like(grad_output)
    dist.all_gather_into_tensor(out, grad_output)
    return out
'''
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, use_cache=False))
    try:
        judged = {}
        for stem in ("67_gnn_feature_exchange_all2all_backward", "2_allgather"):  # 66 by name; 2 follows the tree
            folder = tmp_path / "solutions_cuda_bf16_h100_8_pkb_test-dtype"
            folder.mkdir(exist_ok=True)
            (folder / f"{stem}_cuda.py").write_text(src)
            rec = analyzer.analyze(read_candidate(folder / f"{stem}_cuda.py", tmp_path))
            judged[stem] = (paths(rec.facts.python, "all_to_all_single"), paths(rec.facts.python, "all_gather_into_tensor"))
    finally:
        analyzer.close()
    assert judged["67_gnn_feature_exchange_all2all_backward"] == (["timed"], ["fallback"])
    assert judged["2_allgather"] == (["fallback"], ["timed"])


def test_constants_the_factory_passes_decide_the_tests_on_them():
    # PKB's factory passes problem 80 `n_iterations=3` and ring attention `causal=True` (the
    # catalogue's scalar_args): `if n_iterations == 0:` and `if not causal:` are fallbacks
    src = '''
        import torch
        def solution(x, teacher_temp, n_iterations=3, causal=False, mode="sum"):
            if n_iterations == 0:
                return x * float(x.sum().item())
            if not causal:
                x.max().item()
            if int(n_iterations) >= 1 and mode in ("sum", "mean"):
                x.min().item()
            return x
    '''
    run = RunContext(dtype="bfloat16", world_size=8, multicast=True,
                     scalar_args=(("n_iterations", 3), ("causal", True), ("mode", "sum")))
    by_line = {c.line: c.path for c in facts(src, run).calls if c.qualname == "tensor.item"}
    assert by_line == {5: "fallback", 7: "fallback", 9: "timed"}
    # without the constants nothing is decided; a parameter solution() rebinds is not the factory's
    assert set({c.line: c.path for c in facts(src).calls if c.qualname == "tensor.item"}.values()) == {"timed"}
    rebound = src.replace("            if n_iterations == 0:", "            n_iterations = n_iterations - 3\n            if n_iterations == 0:")
    assert "fallback" not in [c.path for c in facts(rebound, run).calls if c.qualname == "tensor.item" and c.line == 6]
