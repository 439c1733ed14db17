"""emulated_evaluate on CPU: every reference passes, protocol bugs get their subtype, globals are
per rank, hangs end as timeouts, and the fakes are gone afterwards."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch.distributed as dist

import problems
from pkb.emulate import emulated_evaluate, emulated_sweep, evaluate_record, patch

HEADER = '''
import time
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_state = {}


def _handle(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _state:
        buf = symm_mem.empty(x.shape, dtype=x.dtype, device=x.device)
        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    return _state[key]
'''

CANDIDATES = {
    # all-reduce through symmetric memory: write own slot, barrier, sum every rank's buffer, barrier
    "correct": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for p in range(hdl.world_size):
        out += hdl.get_buffer(p, list(x.shape), x.dtype).float()
    hdl.barrier(channel=0)
    return out.to(x.dtype)
''',
    # no barrier between the writes and the reads; the last rank writes late
    "no_barrier": '''
def solution(x):
    buf, hdl = _handle(x)
    if hdl.rank == hdl.world_size - 1:
        time.sleep(0.25)
    buf.copy_(x)
    time.sleep(0.03)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for p in range(hdl.world_size):
        out += hdl.get_buffer(p, list(x.shape), x.dtype).float()
    return out.to(x.dtype)
''',
    # the world size written into the loop
    "hard_coded_2": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier()
    out = torch.zeros(x.shape, dtype=torch.float32)
    for p in range(2):
        out += hdl.get_buffer(p, list(x.shape), x.dtype).float()
    hdl.barrier()
    return out.to(x.dtype)
''',
    # ready flags in the signal pads, set by every writer, never reset: from trial 2 on nobody waits
    "stale_flags": '''
def solution(x):
    buf, hdl = _handle(x)
    ws = hdl.world_size
    if hdl.rank == ws - 1:
        time.sleep(0.25)
    buf.copy_(x)
    for p in range(ws):
        hdl.get_signal_pad(p, [ws], torch.int32)[hdl.rank] = 1
    mine = hdl.get_signal_pad(hdl.rank, [ws], torch.int32)
    while not bool((mine == 1).all()):
        time.sleep(0.001)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for p in range(ws):
        out += hdl.get_buffer(p, list(x.shape), x.dtype).float()
    return out.to(x.dtype)
''',
    # reads only its own buffer
    "local_only": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier()
    out = hdl.get_buffer(hdl.rank, list(x.shape), x.dtype).clone()
    hdl.barrier()
    return out
''',
    # off-by-one slot indexing: rank 0's slot is never read
    "skips_rank0": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier()
    out = torch.zeros(x.shape, dtype=torch.float32)
    for p in range(1, hdl.world_size):
        out += hdl.get_buffer(p, list(x.shape), x.dtype).float()
    hdl.barrier()
    return out.to(x.dtype)
''',
    # right data, plus noise that differs from call to call
    "noisy": '''
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out + torch.rand(out.shape) * 0.5
''',
    # module globals must be per rank: the rank seen at import and every call's rank agree
    "globals": '''
_RANK_AT_IMPORT = dist.get_rank()
_seen = set()


def solution(x):
    _seen.add(dist.get_rank())
    if _seen != {_RANK_AT_IMPORT}:
        raise RuntimeError(f"module globals shared between ranks: {_seen} vs {_RANK_AT_IMPORT}")
    buf, hdl = _handle(x)
    assert len(_state) == 1 and hdl.rank == _RANK_AT_IMPORT
    out = x.clone()
    dist.all_reduce(out)
    return out
''',
    # rank 0 waits in a second barrier nobody else enters
    "deadlock_barrier": '''
def solution(x):
    buf, hdl = _handle(x)
    hdl.barrier()
    if hdl.rank == 0:
        hdl.barrier()
    return x.clone()
''',
    # rank 1 busy-waits in Python on a flag nobody sets
    "deadlock_spin": '''
def solution(x):
    buf, hdl = _handle(x)
    if hdl.rank == 1:
        pad = hdl.get_signal_pad(1, [1], torch.int32)
        while int(pad[0]) == 0:
            pass
    return x.clone()
''',
    "raises": '''
def solution(x):
    if dist.get_rank() == 1:
        raise ValueError("deliberate")
    return x.clone()
''',
    # the sum through the group object's own methods, every overload style PKB-like code uses
    "group_methods": '''
def solution(x):
    group = dist.group.WORLD
    n, me = group.size(), group.rank()
    assert n == dist.get_world_size() and me == dist.get_rank() and isinstance(group.group_name, str)
    backend = group._get_backend(x.device)
    total = x.clone()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    backend.allreduce([total], opts).wait()
    rows = [torch.empty_like(x) for _ in range(n)]
    group.allgather([rows], [x.contiguous()]).wait()
    flat = torch.empty(n * x.numel(), dtype=x.dtype)
    group._allgather_base(flat, x.reshape(-1).contiguous()).wait()
    assert torch.equal(torch.stack(rows).sum(0), flat.view(n, *x.shape).sum(0))
    first = x.clone()
    group.broadcast([first], 0).wait()  # rank 0's input everywhere
    rows0 = rows[0]
    group.barrier().wait()
    assert torch.equal(first, rows0)
    return total
''',
    # the sum through the group's reduce-scatter and all-gather, with its other methods checked on the way
    "group_methods_more": '''
def solution(x):
    group = dist.group.WORLD
    n, me = group.size(), group.rank()
    flat = x.reshape(-1)
    full = torch.cat([flat, flat.new_zeros((-flat.numel()) % n)])
    chunk = full.numel() // n
    mine, mine2 = full.new_empty(chunk), full.new_empty(chunk)
    group._reduce_scatter_base(mine, full).wait()
    group.reduce_scatter([mine2], [list(full.split(chunk))]).wait()
    assert torch.equal(mine, mine2)
    gathered = torch.empty_like(full)
    group._allgather_base(gathered, mine).wait()
    out = gathered[:flat.numel()].view_as(x)
    red = x.clone()
    opts = dist.ReduceOptions()
    opts.rootRank = 0
    group.reduce([red], opts).wait()
    assert me != 0 or torch.allclose(red, out)
    swapped = torch.empty_like(full)
    group.alltoall_base(swapped, full, [], []).wait()
    assert torch.equal(swapped.view(n, chunk)[0], full.view(n, chunk)[me]) if me == 0 else True
    outs = [torch.empty(2) for _ in range(n)]
    group.alltoall(outs, [torch.full((2,), float(10 * me + j)) for j in range(n)]).wait()
    assert [int(o[0]) for o in outs] == [10 * j + me for j in range(n)]
    group.send([torch.full((3,), float(me))], (me + 1) % n, 0).wait()
    got = torch.empty(3)
    group.recv([got], (me - 1) % n, 0).wait()
    assert int(got[0]) == (me - 1) % n
    return out
''',
    # a ProcessGroup method the emulation cannot honour (its C++ object for torch.ops)
    "group_boxed": '''
def solution(x):
    out = x.clone()
    torch.ops.c10d.allreduce_([out], dist.group.WORLD.boxed(), torch.classes.c10d.ReduceOp(), None, False)[1].wait()
    return out
''',
    # the functional collective's operator, with the default group's name
    "funcol_op": '''
def solution(x):
    out = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)
    return torch.ops._c10d_functional.wait_tensor(out)
''',
    # asks for the group's C++ object and takes another road when it is missing
    "probes_boxed": '''
def solution(x):
    out = x.clone()
    if hasattr(dist.group.WORLD, "boxed"):
        torch.ops.c10d.allreduce_([out], dist.group.WORLD.boxed(), torch.classes.c10d.ReduceOp(), None, False)[1].wait()
    else:
        dist.all_reduce(out)
    return out
''',
    # a library call the emulation leaves out
    "coalesced": '''
def solution(x):
    out = x.clone()
    dist.all_reduce_coalesced([out])
    return out
''',
    # a method no ProcessGroup has: the candidate's own mistake, as on real ranks
    "group_typo": '''
def solution(x):
    out = x.clone()
    dist.group.WORLD.allreduse([out]).wait()
    return out
''',
}


def _write(tmp_path, name):
    f = tmp_path / f"1_allreduce_{name}.py"
    f.write_text(HEADER + textwrap.dedent(CANDIDATES[name]), encoding="utf-8")
    return f


def _eval(tmp_path, name, ws, trials=3, **kw):
    kw.setdefault("call_timeout_s", 20.0)
    return emulated_evaluate(_write(tmp_path, name), 1, ws, trials=trials, device="cpu", dtype="float32", **kw)


def _assert_emulated(rec):
    assert rec["emulated"] is True and rec["timing"] is None and rec["speedup"] is None
    assert "timing" not in str(rec.get("details", {}).keys())


# ---- references ------------------------------------------------------------------------------


@pytest.mark.parametrize("ws", (2, 4))
def test_every_problem_reference_passes_under_emulation(ws):
    failures = []
    for pid in problems.ids():
        mod = problems.get(pid).module
        rec = emulated_evaluate(mod.__file__, pid, ws, trials=2, device="cpu", dtype="float32")
        _assert_emulated(rec)
        if not (rec["status"] == "ran" and rec["correct"] and rec["details"]["reference_check"]["matched"]):
            failures.append((pid, rec["outcome"], rec["subtype"], rec["reason"], rec["details"].get("reference_check")))
    assert not failures


@pytest.mark.parametrize("pid", (1, 8, 54, 27))
def test_some_references_pass_at_eight_ranks(pid):
    rec = emulated_evaluate(problems.get(pid).module.__file__, pid, 8, trials=2, device="cpu", dtype="float32")
    assert rec["correct"] and rec["details"]["reference_check"]["matched"], rec["reason"]


def test_a_broken_emulation_would_show_in_the_reference_check(monkeypatch):
    """The self-check must be able to fail: a fake all_reduce that forgets the last rank."""
    from pkb.emulate import fake_dist

    real = fake_dist.reduce_tensors
    monkeypatch.setattr(fake_dist, "reduce_tensors", lambda ts, op: real(ts[:-1], op))
    rec = emulated_evaluate(problems.get(1).module.__file__, 1, 2, trials=1, device="cpu", dtype="float32")
    assert rec["details"]["reference_check"]["matched"] is False


# ---- correct candidates --------------------------------------------------------------------------


@pytest.mark.parametrize("ws", (2, 4, 8))
def test_correct_symm_mem_candidate_passes(tmp_path, ws):
    rec = _eval(tmp_path, "correct", ws)
    _assert_emulated(rec)
    assert rec["status"] == "ran" and rec["correct"], rec["reason"]
    assert rec["outcome"] == "" and "emulated" in rec["reason"]
    assert len(rec["trials"]) == 3 and all(t["matched"] for t in rec["trials"])


@pytest.mark.parametrize("ws", (2, 4))
def test_module_globals_are_per_rank(tmp_path, ws):
    rec = _eval(tmp_path, "globals", ws, trials=2)
    assert rec["correct"], rec["reason"]


# ---- protocol bugs --------------------------------------------------------------------------------


def test_missing_barrier_reads_unwritten_then_stale_peer_data(tmp_path):
    rec = _eval(tmp_path, "no_barrier", 4)
    assert rec["outcome"] == "wrong_result"
    assert rec["subtype"] == "stale", rec["details"].get("subtypes_by_case")
    by_case = rec["details"]["subtypes_by_case"]
    assert {by_case[f"rank{r}/trial0"] for r in range(3)} == {"unwritten"}  # poison never overwritten
    assert {by_case[f"rank{r}/trial{t}"] for r in range(3) for t in (1, 2)} == {"stale"}
    assert "rank3/trial0" not in by_case  # the late writer read the others' finished data
    stale = [h for d in rec["details"]["diagnosis"] for h in d["matched_hypotheses"] if h["name"] == "stale"]
    assert stale and all(h.get("peers") == [3] for h in stale)


def test_flags_never_reset_are_stale_from_the_second_trial(tmp_path):
    rec = _eval(tmp_path, "stale_flags", 2)
    assert rec["outcome"] == "wrong_result" and rec["subtype"] == "stale"
    assert rec["details"]["wrong_trials"] == [1, 2]
    assert rec["trials"][0]["matched"] is True


def test_hard_coded_world_size_passes_at_two_and_misses_peers_beyond(tmp_path):
    f = _write(tmp_path, "hard_coded_2")
    sweep = emulated_sweep(f, 1, (2, 4, 8), trials=2, device="cpu", dtype="float32")
    assert sweep["results"][2]["correct"]
    for ws in (4, 8):
        rec = sweep["results"][ws]
        assert rec["outcome"] == "wrong_result" and rec["subtype"] == "missing_peer", (ws, rec["details"].get("subtypes_by_case"))
        assert "hard-coded as 2" in rec["details"]["hint"]
    assert "assumed <= 2" in sweep["summary"]


@pytest.mark.parametrize("ws", (2, 4))
def test_local_only(tmp_path, ws):
    rec = _eval(tmp_path, "local_only", ws, trials=2)
    assert rec["outcome"] == "wrong_result" and rec["subtype"] == "local_only"


def test_wrong_slot_indexing_names_the_missing_peer(tmp_path):
    rec = _eval(tmp_path, "skips_rank0", 4, trials=2)
    assert rec["outcome"] == "wrong_result" and rec["subtype"] == "missing_peer"
    peers = {tuple(h["peers"]) for d in rec["details"]["diagnosis"] if d["rank"] != 0
             for h in d["matched_hypotheses"] if h["name"] == "missing_peer"}
    assert peers == {(0,)}


def test_nondeterministic_answers_are_named_by_the_repeat_check(tmp_path):
    rec = _eval(tmp_path, "noisy", 2, trials=1)
    assert rec["outcome"] == "wrong_result" and rec["subtype"] == "nondeterministic"
    assert rec["details"]["repeat_check"][0]["ranks_differing"] == [0, 1]


def test_a_candidate_exception_is_a_runtime_error_of_that_rank(tmp_path):
    rec = _eval(tmp_path, "raises", 4, trials=1)
    assert (rec["outcome"], rec["subtype"]) == ("runtime_error", "python_exception")
    assert rec["details"]["failed_ranks"] == [1]


@pytest.mark.parametrize("name", ["group_methods", "group_methods_more"])
def test_a_group_objects_methods_run_as_the_collectives_they_name(tmp_path, name):
    rec = _eval(tmp_path, name, 3, trials=2)
    assert rec["status"] == "ran" and rec["correct"], rec["reason"]


@pytest.mark.parametrize("name, missing", [("group_boxed", "ProcessGroup.boxed"), ("coalesced", "torch.distributed.all_reduce_coalesced"),
                                           ("funcol_op", "torch.ops._c10d_functional.all_reduce")])
def test_what_the_emulation_lacks_is_not_run_not_the_candidates_error(tmp_path, name, missing):
    from pkb.eval.not_run import hint

    rec = _eval(tmp_path, name, 2, trials=1)
    assert (rec["status"], rec["outcome"]) == ("not_run", ""), rec["reason"]
    assert f"not emulated: {missing}" in rec["reason"] and "evaluate it on real ranks" in rec["reason"]
    assert {e["rank"] for e in rec["details"]["not_emulated"]} == {0, 1}
    assert "without --emulate" in hint(rec["reason"])


def test_a_candidate_that_goes_on_past_what_is_not_emulated_is_named(tmp_path):
    rec = _eval(tmp_path, "probes_boxed", 2, trials=1)
    assert rec["status"] == "ran" and rec["correct"], rec["reason"]
    assert rec["details"]["not_emulated_caught"] == ["not emulated: ProcessGroup.boxed"]
    assert any("real ranks take another path" in c for c in rec["emulation"]["caveats"])
    assert "not_emulated_caught" not in _eval(tmp_path, "group_methods", 2, trials=1)["details"]


def test_the_dispatchers_collectives_are_refused_only_during_a_run(tmp_path):
    import torch

    _eval(tmp_path, "funcol_op", 2, trials=1)
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("_c10d_functional::all_reduce", "BackendSelect")


def test_a_method_no_process_group_has_is_the_candidates_error(tmp_path):
    rec = _eval(tmp_path, "group_typo", 2, trials=1)
    assert (rec["status"], rec["outcome"]) == ("ran", "runtime_error"), rec["reason"]
    assert "allreduse" in rec["reason"]


# ---- hangs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, where", [("deadlock_barrier", "barrier"), ("deadlock_spin", "1_allreduce_deadlock_spin.py:")])
def test_deadlock_is_a_timeout_and_does_not_hang(tmp_path, name, where):
    before = patch.originals()
    rec = _eval(tmp_path, name, 2, trials=1, call_timeout_s=1.0)
    assert (rec["outcome"], rec["subtype"]) == ("hang", "timeout"), rec["reason"]
    stuck = rec["details"]["stuck_ranks"]
    assert [s["rank"] for s in stuck] == ([0] if name == "deadlock_barrier" else [1])
    assert where in stuck[0]["blocked_in"]
    assert " in solution" in stuck[0]["where"]  # the candidate's own line, from the rank's stack
    assert rec["details"]["native_stuck_ranks"] == []  # the stuck thread was stopped
    assert patch.originals() == before
    # the process is still usable for the next run
    assert _eval(tmp_path, "correct", 2, trials=1)["correct"]


# ---- plumbing ----------------------------------------------------------------------------------------


def test_fakes_are_removed_after_runs(tmp_path):
    real = {n: getattr(dist, n) for n in ("all_reduce", "get_rank", "barrier", "new_group", "group")}
    _eval(tmp_path, "correct", 2, trials=1)
    _eval(tmp_path, "raises", 2, trials=1)
    for n, fn in real.items():
        assert getattr(dist, n) is fn
    assert not dist.is_initialized()
    assert not [m for m in __import__("sys").modules if m.startswith("pkb_emulated_")]


def test_cuda_candidates_are_not_run_on_cpu():
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "emulate", "1_allreduce_symm_correct.py")
    rec = emulated_evaluate(fixture, 1, 2, trials=1, device="cpu")
    assert rec["status"] == "not_run" and "needs the GPU" in rec["reason"]


def test_evaluate_record_runs_the_source_text(tmp_path):
    class Rec:
        problem_id = 1
        path = "somewhere/1_allreduce_x.py"
        source = HEADER + textwrap.dedent(CANDIDATES["local_only"])
        parse_status = "ok"

    rec = evaluate_record(Rec(), 2, trials=1, device="cpu", dtype="float32")
    assert rec["emulated"] and rec["subtype"] == "local_only" and rec["candidate_path"] == Rec.path
