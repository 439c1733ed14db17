"""One list of library collectives (pkb/collectives.py): the static pass, the evaluation's static
checks, its runtime counter and the emulation all read it."""

from __future__ import annotations

import textwrap

from analyzer.python_pass import analyze_python
from pkb.collectives import COUNTED, DATA_COLLECTIVES, FUNCOL_COLLECTIVES, FUNCOL_WAITS, HOST_SYNCS, MOVES_DATA, OBJECT_TRANSFERS, P2P
from pkb.eval.static_checks import static_flags

CALLS = '''
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

def solution(x, hdl):
    dist.all_reduce(x)
    y = funcol.all_gather_tensor(x, 0, [0, 1])
    y = funcol.wait_tensor(y)
    dist.broadcast_object_list([1])
    op = dist.P2POp(dist.isend, x, 1)
    dist.batch_isend_irecv([op])
    dist.barrier()
    hdl.barrier()
    r = dist.get_rank()
    return x
'''


def _categories(src: str) -> dict[str, str]:
    facts = analyze_python(textwrap.dedent(src), "cand.py")
    return {c.qualname.split(".")[-1]: c.category for c in facts.calls}


def test_the_static_pass_names_library_calls_from_the_one_list():
    cats = _categories(CALLS)
    assert cats["all_reduce"] == "collective"
    assert cats["all_gather_tensor"] == "collective"  # a functional collective
    assert cats["wait_tensor"] == "collective"  # completes one
    assert cats["broadcast_object_list"] == "collective"
    assert cats["P2POp"] == "p2p" and cats["batch_isend_irecv"] == "p2p"
    facts = analyze_python(textwrap.dedent(CALLS), "cand.py")
    host = [c for c in facts.calls if c.category == "host_sync"]
    assert [c.qualname for c in host] == ["torch.distributed.barrier"]
    assert "get_rank" not in cats  # a rank query is no collective


def test_a_try_except_falling_back_to_any_data_moving_library_call_is_flagged():
    template = "import torch.distributed as dist\ndef solution(x):\n    try:\n        return f(x)\n    except Exception:\n        dist.{call}\n        raise\n"
    for call in ("all_reduce(x)", "broadcast_object_list([x])", "send_object_list([x], 1)", "isend(x, 1)"):
        flags = static_flags(template.format(call=call))
        assert [f["line"] for f in flags if f["flag"] == "fallback_try_except"] == [5], call
    for call in ("barrier()", "monitored_barrier()", "get_rank()"):
        assert not [f for f in static_flags(template.format(call=call)) if f["flag"] == "fallback_try_except"], call


def test_the_sets_are_disjoint_where_they_must_be():
    assert not HOST_SYNCS & MOVES_DATA  # a barrier moves nothing
    assert not FUNCOL_WAITS & MOVES_DATA  # a wait completes a transfer counted already
    assert not (DATA_COLLECTIVES | FUNCOL_COLLECTIVES | OBJECT_TRANSFERS) & P2P


def test_the_emulation_replaces_every_library_call_it_does_not_name_as_left_to_torch():
    from pkb.emulate import fake_dist

    library = DATA_COLLECTIVES | OBJECT_TRANSFERS | P2P | HOST_SYNCS
    assert fake_dist.NOT_EMULATED <= library  # no stale name
    assert library - fake_dist.NOT_EMULATED <= set(fake_dist.DIST_FUNCTIONS)
    assert not fake_dist.NOT_EMULATED & set(fake_dist.DIST_FUNCTIONS)
    assert set(fake_dist.FUNCOL_FUNCTIONS) <= DATA_COLLECTIVES | FUNCOL_COLLECTIVES | FUNCOL_WAITS


def test_the_runtime_counter_counts_object_transfers_and_keeps_barriers_apart():
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from pkb.eval.guard import DistCounter

    owners = [dist, c10d]
    try:
        import torch.distributed._functional_collectives as funcol

        owners.append(funcol)
    except Exception:
        pass
    before = {(id(o), n): vars(o)[n] for o in owners for n in COUNTED if n in vars(o)}
    counter = DistCounter()
    try:
        counter.install()
        counter.active = True
        for call in (lambda: dist.broadcast_object_list([1]), lambda: dist.all_reduce(None), lambda: dist.barrier()):
            try:
                call()  # no process group here: the library raises after the counter saw the call
            except Exception:
                pass
        assert counter.counts["broadcast_object_list"] == 1 and counter.counts["all_reduce"] == 1
        assert counter.counts["barrier"] == 1 and counter.host_syncs == 1
        assert counter.total == sum(counter.counts.values()) - 1
    finally:
        counter.uninstall()
    assert all(vars(next(o for o in owners if id(o) == owner_id))[name] is value for (owner_id, name), value in before.items())


def test_the_dispatchers_collective_operators_are_counted_under_names_of_the_one_list():
    """Every collective operator of this torch's c10d namespaces is in DISPATCHER_OPS (a new one
    fails here, not silently past the counter), each counted under a torch.distributed name."""
    import torch

    from pkb.collectives import DISPATCHER_OPS

    assert set(DISPATCHER_OPS.values()) <= COUNTED
    moves_nothing = {"_c10d_functional::wait_tensor", "_c10d_functional::_wrap_tensor_autograd", "c10d::check_for_nan"}
    # (_dtensor's other operators, defined once DTensor is imported, are no collectives)
    present = {n for n in torch._C._dispatch_get_all_op_names() if n.split("::")[0] in ("c10d", "_c10d_functional")}
    assert present - moves_nothing <= set(DISPATCHER_OPS), sorted(present - moves_nothing - set(DISPATCHER_OPS))


def test_process_group_methods_are_counted_under_names_of_the_one_list():
    from pkb.collectives import COUNTED, PROCESS_GROUP_METHODS

    assert set(PROCESS_GROUP_METHODS.values()) <= COUNTED


def test_a_handler_calling_the_group_object_is_a_fallback():
    from pkb.eval.static_checks import static_flags

    src = (
        "import torch.distributed as dist\n"
        "def solution(x):\n"
        "    try:\n"
        "        return ext.run(x)\n"
        "    except Exception:\n"
        "        pg = dist.group.WORLD\n"
        "        pg.allreduce([x]).wait()\n"
        "        return x\n"
    )
    assert [f["flag"] for f in static_flags(src)] == ["fallback_try_except"]
    scatter = src.replace("pg.allreduce([x]).wait()", "x = x.scatter(0, idx, x)")  # a tensor method
    assert static_flags(scatter) == []


def test_the_counter_waits_on_the_work_a_candidates_call_left_running(tmp_path):
    """An async_op=True collective never waited: the counter keeps its Work while active and
    finish_pending waits on it (the timed call then ends after the data moved); waited works and
    works started while inactive are not its business."""
    import torch
    import torch.distributed as dist

    from pkb.eval.guard import DistCounter

    class SlowWork:  # a work still running when the call returns, done once waited
        def __init__(self) -> None:
            self.done = False

        def is_completed(self) -> bool:
            return self.done

        def wait(self) -> bool:
            self.done = True
            return True

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    counter = DistCounter()
    try:
        counter.install()
        x = torch.ones(4)
        counter.active = True
        work = dist.all_reduce(x, async_op=True)
        work.wait()  # waited by the caller: complete, nothing left to do
        counter._keep_work(SlowWork())
        counter._keep_work((None, SlowWork()))  # a c10d operator's (tensors, work) pair
        counter.active = False
        dist.all_reduce(x, async_op=True).wait()  # inactive: not kept
        assert len(counter.pending) == 3
        assert counter.finish_pending() == 2
        assert counter.pending == [] and counter.finish_pending() == 0
    finally:
        counter.uninstall()
        dist.destroy_process_group()
