"""Library collectives that PKB's run reaches only on a fallback branch: guards decided through
module constants, dtype tables and the inputs' extents, a process group left at None, guards the
candidate itself calls its fallback, and metadata exchanged through a helper. Small candidates
written for the purpose."""

from static_helpers import facts, paths

from analyzer.python_pass import RunContext, is_metadata_collective



def test_world_size_compared_with_a_module_constant():
    src = '''
        import torch.distributed as dist
        NUM_DEVICES = 8
        def solution(x, group=None):
            world = dist.get_world_size(group)
            if world != NUM_DEVICES:
                dist.all_reduce(x, group=group)   # fallback for other node sizes
                return x
            return ext.run(x)
    '''
    assert paths(facts(src), "all_reduce") == ["fallback"]
    # at world size 4 the same guard is the run's path
    assert paths(facts(src, RunContext(dtype="bfloat16", world_size=4)), "all_reduce") == ["timed"]


def test_a_module_name_rebound_through_global_is_no_constant():
    f = facts('''
        import torch.distributed as dist
        NUM_DEVICES = 8
        def configure(n):
            global NUM_DEVICES
            NUM_DEVICES = n
        def solution(x):
            if dist.get_world_size() != NUM_DEVICES:
                dist.all_reduce(x)
            return x
    ''')
    assert paths(f, "all_reduce") == ["timed"]


def test_dtype_table_lookup_and_membership():
    lookup = '''
        import torch
        import torch.distributed as dist
        DTYPE_TO_IDX = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3}
        SUPPORTED = (torch.float16, torch.bfloat16)
        def solution(x):
            idx = DTYPE_TO_IDX.get(x.dtype, -1)
            if idx == -1:
                dist.all_reduce(x)
                return x
            if x.dtype not in SUPPORTED:
                dist.all_gather_into_tensor(x, x)
                return x
            return ext.run(x, idx)
    '''
    f = facts(lookup)
    assert paths(f, "all_reduce") == ["fallback"]
    assert paths(f, "all_gather_into_tensor") == ["fallback"]
    # float64 misses a table that also holds an integer dtype: left undecided, as is the run's path
    f64 = facts(lookup, RunContext(dtype="float64", world_size=8))
    assert paths(f64, "all_reduce") == ["timed"]
    assert paths(f64, "all_gather_into_tensor") == ["timed"]


def test_empty_input_extents_never_hold_on_the_run():
    f = facts('''
        import torch
        import torch.distributed as dist
        def solution(a, b, weights):
            M, K = a.shape
            n_w = len(weights)
            if M == 0 or K == 0:
                c = a @ b
                dist.all_reduce(c)
                return c
            if n_w == 0:
                dist.barrier()
            tmp = torch.empty(M)
            head = tmp.shape[0]
            if head == 0:
                torch.cuda.synchronize()   # an extent of an intermediate: not decided
            return ext.gemm_allreduce(a, b)
    ''')
    assert paths(f, "all_reduce") == ["fallback"]
    assert paths(f, "barrier") == ["fallback"]
    assert paths(f, "torch.cuda.synchronize") == ["timed"]


def test_world_size_of_a_group_parameter_left_at_none():
    f = facts('''
        import torch.distributed as dist
        def solution(x, group=None):
            w = dist.get_world_size(group)
            if w != 8:
                dist.all_reduce(x, group=group)
                return x
            return ext.run(x)
    ''')
    assert paths(f, "all_reduce") == ["fallback"]


DECLARED = '''
    import torch
    import torch.distributed as dist

    def _reference_impl(x, group):
        dist.all_to_all_single(torch.empty_like(x), x, group=group)
        return x

    def solution(x, group=None):
        # Only 2D inputs take the fast path; FALLBACK_NOTE
        if x.dim() != 2:
            out = torch.empty_like(x)
            dist.all_gather_into_tensor(out, x)
            return out
        if x.size(1) > 4096:
            return _reference_impl(x, group)
        if x.size(0) > 65536:
            dist.all_reduce(x)
        return ext.run(x)
'''


def test_a_guard_the_candidate_calls_its_fallback():
    f = facts(DECLARED.replace("FALLBACK_NOTE", "else fall back to NCCL"))
    assert paths(f, "all_gather_into_tensor") == ["fallback"]
    # a body that calls a function named as the reference implementation
    assert paths(f, "all_to_all_single") == ["fallback"]
    # an undecided guard that does not exit and says nothing stays on the timed path
    assert paths(f, "all_reduce") == ["timed"]


def test_an_undecided_guard_with_no_word_of_fallback_stays_timed():
    f = facts(DECLARED.replace("FALLBACK_NOTE", "else the generic path").replace("_reference_impl", "_generic_impl"))
    assert paths(f, "all_gather_into_tensor") == ["timed"]
    assert paths(f, "all_to_all_single") == ["timed"]


def test_counts_exchanged_through_a_helper_are_metadata_but_node_ids_are_not():
    f = facts('''
        import torch
        import torch.distributed as dist

        def _all_gather_int64(t, world_size):
            out_list = [torch.empty_like(t) for _ in range(world_size)]
            dist.all_gather(out_list, t)
            return torch.stack(out_list)

        def _exchange(nodes, world_size):
            out = [torch.empty_like(nodes) for _ in range(world_size)]
            dist.all_gather(out, nodes)
            return out

        def solution(x, counts):
            counts_t = torch.tensor(counts, dtype=torch.int64, device=x.device)
            all_counts = _all_gather_int64(counts_t, 8)
            node_ids = torch.tensor(counts, dtype=torch.int64, device=x.device)
            _exchange(node_ids, 8)
            return ext.run(x, all_counts)
    ''')
    gathers = {c.line: is_metadata_collective(c) for c in f.calls if c.qualname.endswith("all_gather")}
    assert sorted(gathers.values()) == [False, True]
    assert gathers[min(gathers)] is True  # the helper of counts comes first in the file


def test_the_tail_of_an_aligned_size_is_empty():
    f = facts('''
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="e", cpp_sources="", cuda_sources="",
                          functions=["vector_part", "scalar_tail", "other_size"])
        def solution(x, y):
            n = x.numel()
            m = y.numel()
            chunks = n // 8
            tail_start = chunks * 8
            ext.vector_part(x, chunks)
            if tail_start < n:
                ext.scalar_tail(x, tail_start)
            if tail_start < m:
                ext.other_size(y)    # compared with another size: not decided
            return x
    ''')
    assert paths(f, "ext.scalar_tail") == ["fallback"]
    assert paths(f, "ext.other_size") == ["timed"]
