"""Hostile candidates through the real launcher (the rank spawner, gloo, 2 ranks on CPU).

Every CPU-runnable entry of corpus/hostile/manifest.toml runs in one `evaluate` call (two launches
at a time, tight per-phase limits) and must get the manifest's outcome and subtype; the harness
must come out of it alive with one result per candidate. Then the checks behind the outcomes
(which phase a hang was in, which signal a crash had, that a forked child is dead), the pure parts
without a launch, the exit codes of `pkb-analyze eval`, and a soak over the bundled corpus's
pure-PyTorch candidates.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch

from pkb.corpus import load_corpus, read_candidate
from pkb.eval import EvalOptions, evaluate
from pkb.eval import job as jobfiles
from pkb.store import Store

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO / "corpus" / "hostile"
MANIFEST = tomllib.loads((HOSTILE / "manifest.toml").read_text())["candidate"]
CPU_ENTRIES = [e for e in MANIFEST if not e["needs_gpu"] and not e.get("needs_memory_limit") and e.get("min_iters", 0) <= 3]
# entries whose trick shows only past the batch's 3 timed calls, run on their own
LONGER_ENTRIES = [e for e in MANIFEST if not e["needs_gpu"] and e.get("min_iters", 0) > 3]
# The batch (every CPU entry, two launches at a time) is one fixture, charged to its first test:
# about 5 min on an idle 2-core machine, past the suite's 600 s at a load average of 10.
pytestmark = pytest.mark.timeout(1500)
CALL_LIMIT_S = 10.0
IMPORT_LIMIT_S = 10.0


def hostile_options(tmp: Path, **over) -> EvalOptions:
    base = dict(
        world_size=2, trials=2, dtype="float32", backend="gloo", timeout_s=90.0, warmup=1, iters=3, groups=2,
        store_path=str(tmp / "hostile.sqlite"), work_dir=str(tmp / "work"), jobs=2, corpus_root=str(HOSTILE),
        call_timeout_s=CALL_LIMIT_S, import_timeout_s=IMPORT_LIMIT_S, compile_timeout_s=30.0,
    )
    base.update(over)
    return EvalOptions(**base)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    entries = sorted(CPU_ENTRIES, key=lambda e: e["path"])
    # state_leak_a first and state_leak_b last: far apart, so never in one launch slot's time
    entries.sort(key=lambda e: {"1_allreduce_state_leak_a.py": 0, "1_allreduce_state_leak_b.py": 2}.get(e["path"], 1))
    records = []
    for e in entries:
        rec = read_candidate(HOSTILE / e["path"], root=HOSTILE)  # paths relative to the folder, as the CLI reads them
        assert rec.problem_id == e["problem"], e["path"]
        records.append(rec)
    options = hostile_options(tmp)
    t0 = time.monotonic()
    evaluate(records, options)  # must return, whatever the candidates do
    first_runs = {Path(r.path).name: r.evaluation for r in records}
    # the resume: what an unowned SIGKILL ended (not_run) runs again, and its second death is charged
    retried = [r for r in records if r.evaluation["status"] == "not_run"]
    evaluate(retried, options)
    wall = time.monotonic() - t0
    return {"by_path": {Path(r.path).name: r for r in records}, "options": options, "wall": wall, "tmp": tmp, "first_runs": first_runs}


@pytest.mark.parametrize("entry", CPU_ENTRIES, ids=[e["path"] for e in CPU_ENTRIES])
def test_hostile_candidate_gets_the_manifest_outcome(batch, entry):
    first = batch["first_runs"][entry["path"]]
    assert first["status"] == entry.get("first_run", "ran"), (first["status"], first.get("reason"))
    ev = batch["by_path"][entry["path"]].evaluation
    assert ev["status"] == "ran", ev.get("reason")
    assert ev["outcome"] in entry["outcome"].split("|"), (ev["outcome"], ev["subtype"], ev["reason"])
    if entry["subtype"] != "*":
        assert ev["subtype"] in entry["subtype"].split("|"), (ev["outcome"], ev["subtype"], ev["reason"])
    if ev["outcome"] in ("suspect", "wrong_result", "hang", "runtime_error", "compile_error", "load_error"):
        assert ev["correct"] is False and ev["speedup"] is None or ev["outcome"] == "suspect"


@pytest.mark.parametrize("entry", LONGER_ENTRIES, ids=[e["path"] for e in LONGER_ENTRIES])
def test_hostile_candidate_that_needs_more_timed_calls_gets_the_manifest_outcome(tmp_path, entry):
    rec = read_candidate(HOSTILE / entry["path"], root=HOSTILE)
    evaluate([rec], hostile_options(tmp_path, iters=max(10, entry["min_iters"]), jobs=1))
    ev = rec.evaluation
    assert (ev["outcome"], ev["subtype"]) == (entry["outcome"], entry["subtype"]), ev["reason"]


def test_harness_survives_and_stores_one_outcome_each(batch):
    assert all(r.evaluation["status"] == "ran" for r in batch["by_path"].values())
    with Store(batch["options"].store_path) as store:
        out = store.outcomes()
    assert len(out) == len(CPU_ENTRIES) and out["sha256"].is_unique
    assert set(out["status"]) == {"ran"}


def _ev(batch, name):
    return batch["by_path"][f"1_allreduce_{name}.py"].evaluation


def test_hangs_name_the_phase_and_are_killed_at_its_limit(batch):
    imp = _ev(batch, "loop_at_import")
    assert imp["details"]["phase_timeout"]["phase"] == "load"
    assert imp["details"]["phase_timeout"]["limit_s"] == IMPORT_LIMIT_S
    for name in ("infinite_loop_call", "sleep_past_limit", "deadlock_barrier"):
        ev = _ev(batch, name)
        pt = ev["details"]["phase_timeout"]
        assert pt["phase"].startswith("trial 0 candidate"), pt
        assert pt["limit_s"] == CALL_LIMIT_S  # the per-call limit did it, not the 90 s job limit
        assert ev["reason"].startswith(f"rank {pt['rank']} past the {CALL_LIMIT_S:g} s limit"), ev["reason"]
        _assert_nothing_left(ev)


def _assert_nothing_left(ev, pids=None):
    """No process of the launch alive: inside a sandbox the pids are its namespace's, so its
    cgroup being gone (removed only once empty) is the evidence; without one, the pids."""
    from pkb.eval.sandbox import processes_of_job

    assert processes_of_job(ev["job_dir"]) == []
    box = ev["details"].get("sandbox") or {}
    if box.get("cgroup"):
        assert not os.path.exists(box["cgroup"]), box
    if box.get("kind", "none") == "none":
        if pids is None:
            pids = [(jobfiles.read_json(jobfiles.status_path(ev["job_dir"], r)) or {}).get("pid") for r in range(2)]
        for pid in filter(None, pids):
            assert _dead(pid), pid


def _dead(pid: int) -> bool:
    """Gone or a zombie (killed; its new parent has not reaped it yet)."""
    for _ in range(50):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.1)
    return False


def test_crashes_name_the_signal_or_exit_code(batch):
    seg = _ev(batch, "segfault")
    assert seg["details"]["signal"] == "SIGSEGV" and "SIGSEGV" in seg["reason"]
    kill = _ev(batch, "sigkill_self")
    assert kill["details"]["signal"] == "SIGKILL" and "SIGKILL" in kill["reason"]
    assert kill["reason"].startswith("rank killed by SIGKILL twice") and kill["details"]["outside_kills"] == 2
    ex = _ev(batch, "exit_at_import")
    assert any(c.get("exit_code") == 3 for c in ex["details"]["crashed_ranks"]), ex["details"]
    assert "code 3" in ex["reason"]


def test_forked_child_that_outlives_the_call_is_killed(batch):
    ev = _ev(batch, "fork_child")
    pids = [int(p.read_text()) for p in Path(ev["job_dir"]).glob("scratch/rank*/stray_child.pid")]
    assert pids, "the candidate's child never wrote its pid"
    _assert_nothing_left(ev, pids)
    assert {s["pid"] for s in ev["details"]["stray_processes"]} >= set(pids)


def test_setsid_sleeper_without_a_marker_is_named_and_killed(batch):
    ev = _ev(batch, "setsid_sleeper")
    pids = [int(p.read_text()) for p in Path(ev["job_dir"]).glob("scratch/rank*/sleeper.pid")]
    assert len(pids) == 2
    named = {s["pid"]: s["cmdline"] for s in ev["details"]["stray_processes"]}
    assert all(named.get(p) == "sleep 3600" for p in pids), named
    _assert_nothing_left(ev, pids)


def test_a_candidate_that_kills_its_ancestors_leaves_the_run_going(batch):
    ev = _ev(batch, "kills_ancestors")
    assert ev["details"]["signal"] == "SIGKILL"
    if ev["details"]["sandbox"]["kind"] == "bwrap":
        assert "the rank spawner itself was killed" in ev["reason"]
    _assert_nothing_left(ev)
    # the launches after it ran: every candidate has its outcome (checked per entry above)


def test_a_store_trigger_never_reaches_the_store(batch):
    import sqlite3

    ev = _ev(batch, "store_trigger")
    assert ev["outcome"] == "wrong_result"
    conn = sqlite3.connect(batch["options"].store_path)
    try:
        assert conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall() == []
        stored = conn.execute("SELECT outcome, speedup FROM outcomes WHERE sha256=?", (batch["by_path"]["1_allreduce_store_trigger.py"].sha256,)).fetchone()
    finally:
        conn.close()
    assert stored == ("wrong_result", None)
    if ev["details"]["sandbox"]["kind"] == "bwrap":  # the store is not even visible inside
        assert not list(Path(ev["job_dir"]).glob("scratch/rank*/planted_trigger.txt"))


def test_each_candidate_runs_in_fresh_processes(batch):
    a, b = _ev(batch, "state_leak_a"), _ev(batch, "state_leak_b")
    boxes = [ev["details"].get("sandbox") or {} for ev in (a, b)]
    if all(box.get("kind") in ("bwrap", "unshare") for box in boxes):  # pids are per PID namespace: the same numbers each time
        assert boxes[0]["cgroup"] != boxes[1]["cgroup"] or not boxes[0]["cgroup"]
    else:
        pids = lambda ev: {jobfiles.read_json(jobfiles.status_path(ev["job_dir"], r))["pid"] for r in range(2)}
        assert not pids(a) & pids(b)
    assert b["outcome"] in ("faster", "slower"), b["reason"]


def test_forged_results_and_planted_files_are_named(batch):
    forged = _ev(batch, "forge_result")
    assert "result_rank0.json" in forged["details"]["forged_files"]
    planted = _ev(batch, "writes_job_dir")
    assert planted["details"]["unexpected_files"] == ["planted_by_candidate.txt"]


def test_a_collective_library_loaded_through_ctypes_is_in_the_record(batch):
    ev = _ev(batch, "ctypes_nccl")
    libraries = ev["details"]["collective_libraries"]
    assert any(r.get("via") == "ctypes" and r.get("library") == "libnccl.so.2" for r in libraries), libraries
    assert any(f["flag"] == "fallback_try_except" for f in ev["details"]["static_flags"])
    assert "collective_libraries" not in _ev(batch, "fallback_try")["details"]  # none loaded there


def test_scratch_is_the_candidates_home_and_cwd(batch):
    ev = _ev(batch, "writes_job_dir")
    assert (Path(ev["job_dir"]) / "scratch" / "rank0").is_dir()
    # the job dir holds no leftover key file
    assert not list(Path(ev["job_dir"]).glob(".key_rank*"))


def test_calls_reference_and_tamper_reasons_say_what(batch):
    assert "reference" in _ev(batch, "imports_reference")["reason"]
    assert "time.perf_counter" in _ev(batch, "patch_perf_counter")["reason"]
    assert "torch.allclose" in _ev(batch, "patch_allclose")["reason"]
    assert "elapsed_time" in _ev(batch, "patch_event")["reason"]
    fb = _ev(batch, "fallback_try")
    assert fb["details"]["dist_calls_during_candidate"] > 0
    assert any(f["flag"] == "fallback_try_except" for f in fb["details"]["static_flags"])


def test_stubborn_children_are_all_counted_and_dead(batch):
    ev = _ev(batch, "many_stubborn_children")
    pids = [int(p.read_text()) for p in Path(ev["job_dir"]).glob("scratch/rank*/stubborn_*.pid")]
    assert len(pids) == 48  # 24 a rank
    assert ev["details"]["stray_count"] >= 48 and len(ev["details"]["stray_processes"]) == 16
    assert f"{ev['details']['stray_count']} process(es) left behind" in ev["reason"]
    _assert_nothing_left(ev, [] if (ev["details"].get("sandbox") or {}).get("kind") != "none" else pids)


def test_a_store_overwritten_through_proc_keeps_every_record(batch):
    import sqlite3

    conn = sqlite3.connect(batch["options"].store_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM outcomes").fetchone()[0] == len(CPU_ENTRIES)
    finally:
        conn.close()


def test_the_store_and_the_harness_code_are_out_of_reach_by_path(batch):
    from pkb.eval.sandbox import ENCLOSED_UNSHARE

    ev = _ev(batch, "store_by_path")
    box = ev["details"]["sandbox"]
    reached = [line for p in Path(ev["job_dir"]).glob("scratch/rank*/reached.txt") for line in p.read_text().splitlines()]
    assert len(list(Path(ev["job_dir"]).glob("scratch/rank*/reached.txt"))) == 2
    walled = box["kind"] == "bwrap" or (box["kind"] == "unshare" and os.environ.get("PKB_SANDBOX_ENCLOSE", "1") != "0"
                                         and not box.get("walls_off"))
    if box["kind"] == "unshare" and walled:
        assert box["isolates"] == ENCLOSED_UNSHARE[0], box
    if walled:
        assert reached == [], reached
    assert not (REPO / "pkb" / "eval" / "planted_by_candidate.py").exists()


def test_a_forged_frame_on_the_verdict_channel_is_tampering(batch):
    ev = _ev(batch, "forge_channel_frames")
    assert "verdict channel" in ev["reason"] and ev["details"]["channel_forgery"]


def test_a_flood_of_output_is_cut_to_the_log_cap(batch):
    from pkb.eval.job import LOG_CAP_BYTES

    ev = _ev(batch, "huge_output")
    logs = list(Path(ev["job_dir"]).glob("rank*.std*"))
    assert len(logs) == 4 and all(p.stat().st_size <= LOG_CAP_BYTES for p in logs)
    # at least: what the rank appends between a cut's read and its truncate is lost uncounted
    dropped = ev["details"]["logs_dropped"]
    assert len(dropped) == 4 and all(n >= 128 << 20 for n in dropped.values()), dropped


# ---- the pure parts, no launch ----------------------------------------------------------------------


def test_static_flags():
    from pkb.eval.static_checks import static_flags

    flags = {f["flag"] for f in static_flags((HOSTILE / "1_allreduce_fallback_try.py").read_text())}
    assert "fallback_try_except" in flags
    assert {f["flag"] for f in static_flags((HOSTILE / "1_allreduce_imports_reference.py").read_text())} == {"imports_reference"}
    assert "l2_persistence" in {f["flag"] for f in static_flags((HOSTILE / "1_allreduce_l2_persist_cuda.py").read_text())}
    assert "harness_access" in {f["flag"] for f in static_flags((HOSTILE / "1_allreduce_patch_compare_in_call.py").read_text())}
    for name in ("c10d_op_fallback", "funcol_op_fallback", "funcol_gather_inference", "dispatch_key_excluded"):  # torch.ops.<c10d namespace>.<op>
        assert "fallback_try_except" in {f["flag"] for f in static_flags((HOSTILE / f"1_allreduce_{name}.py").read_text())}, name
    waits_only = "import torch\ndef solution(x):\n    try:\n        return f(x)\n    except Exception:\n        return torch.ops._c10d_functional.wait_tensor(x)\n"
    assert static_flags(waits_only) == []
    plain = "import torch.distributed as dist\ndef solution(x):\n    out = x.clone()\n    dist.all_reduce(out)\n    return out\n"
    assert static_flags(plain) == []
    guarded = "def solution(x):\n    try:\n        return f(x)\n    except ValueError:\n        raise\n"
    assert static_flags(guarded) == []


def test_signed_files_reject_forgery_and_edits():
    data = jobfiles.signed({"rank": 0, "finished": True, "x": 1.5}, "k" * 32)
    assert jobfiles.verify(data, "k" * 32)
    assert not jobfiles.verify({**data, "finished": False}, "k" * 32)
    assert not jobfiles.verify({"rank": 0, "finished": True}, "k" * 32)
    assert not jobfiles.verify(data, "j" * 32)


def test_snapshot_sees_a_replaced_timer_and_restores_it():
    import time as _time

    from pkb.eval.guard import HarnessSnapshot

    snap = HarnessSnapshot()
    assert snap.changed() == []
    real = _time.perf_counter
    _time.perf_counter = lambda: 0.0
    torch.Tensor.__eq__ = lambda self, other: True
    try:
        changed = snap.changed()
        assert "time.perf_counter" in changed and "torch.Tensor.__eq__" in changed
    finally:
        snap.restore()
    assert _time.perf_counter is real and "__eq__" not in vars(torch.Tensor)
    assert snap.changed() == []


def test_dist_counter_counts_process_group_methods_once(tmp_path):
    """A collective through the process group object is counted; dist.all_reduce, which calls the
    group's method itself, is still one call."""
    import torch.distributed as dist

    from pkb.eval.guard import DistCounter, HarnessSnapshot, process_group_classes

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    classes = process_group_classes()
    originals = {(cls, name): cls.__dict__.get(name) for cls in classes for name in vars(cls)}
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    c = DistCounter()
    real = dist.all_reduce
    try:
        c.install()
        group = dist.distributed_c10d._get_default_group()
        snapshot = HarnessSnapshot()
        c.active = True
        group.allreduce([torch.ones(4)]).wait()
        assert c.counts == {"all_reduce": 1}
        dist.all_reduce(torch.ones(4))
        assert c.counts == {"all_reduce": 2}  # the group's method under it is not counted again
        dist.barrier()
        assert c.total == 2 and c.host_syncs == 1
        c.active = False
        group.allreduce([torch.ones(4)]).wait()
        assert c.total == 2
        # putting the unwrapped method back is tampering with the harness
        type(group).allreduce = type(group).__dict__["allreduce"].__wrapped__
        assert f"c10d.{type(group).__name__}.allreduce" in snapshot.changed()
    finally:
        dist.destroy_process_group()
        c.uninstall()
        assert dist.all_reduce is real
        assert all(cls.__dict__.get(name) is fn for (cls, name), fn in originals.items())


def test_dist_counter_counts_only_while_active():
    import torch.distributed as dist

    from pkb.eval.guard import DistCounter

    c = DistCounter()
    real = dist.all_reduce
    try:
        c.install()
        assert dist.all_reduce is not real and dist.all_reduce.__wrapped__ is real
        try:
            dist.all_reduce(torch.ones(1))  # no process group: raises, but was counted only if active
        except Exception:
            pass
        assert c.total == 0
        c.active = True
        try:
            dist.all_reduce(torch.ones(1))
        except Exception:
            pass
        assert c.counts == {"all_reduce": 1}
    finally:
        c.uninstall()
        assert dist.all_reduce is real


def test_dist_counter_counts_the_dispatchers_collective_operators(tmp_path):
    """torch.ops.c10d.* and torch.ops._c10d_functional.* reach NCCL/gloo with no torch.distributed
    function or ProcessGroup method in between: counted at the dispatcher, inference_mode or not,
    once per call whatever route led there; a dropped dispatcher kernel is tampering."""
    import torch.distributed as dist

    from pkb.eval.guard import DistCounter, HarnessSnapshot

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    c = DistCounter()
    try:
        c.install()
        assert "c10d::allreduce_" in c.dispatcher_ops and "_c10d_functional::all_reduce" in c.dispatcher_ops
        group = dist.distributed_c10d._get_default_group()
        snapshot = HarnessSnapshot()
        c.active = True
        _, work = torch.ops.c10d.allreduce_([torch.ones(4)], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)
        work.wait()
        assert c.counts == {"all_reduce": 1}
        out = torch.ops._c10d_functional.all_reduce(torch.ones(4), "sum", group.group_name)
        torch.ops._c10d_functional.wait_tensor(out)  # completes a transfer, moves nothing itself
        assert c.counts == {"all_reduce": 2}
        with torch.inference_mode():
            g = torch.ops._c10d_functional.all_gather_into_tensor.default(torch.ones(1, 4), 1, group.group_name)
            torch.ops._c10d_functional.wait_tensor(g)
        assert c.counts == {"all_reduce": 2, "all_gather_into_tensor": 1}
        dist.all_reduce(torch.ones(4))  # function -> group method -> c10d::allreduce_: one call
        group.allreduce([torch.ones(4)]).wait()
        assert c.counts == {"all_reduce": 4, "all_gather_into_tensor": 1}
        c.active = False
        torch.ops.c10d.allreduce_([torch.ones(4)], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)[1].wait()
        assert c.total == 5
        assert snapshot.changed() == []
        # past every wrapper and kernel of ours: the group's sequence number still counts it
        mark = c.mark()
        dist.all_reduce(torch.ones(4))
        assert c.uncounted_since(mark) == 0  # seen by the wrappers
        hidden, t, boxed, op = torch._C.DispatchKeySet(torch._C.DispatchKey.BackendSelect), torch.ones(4), group.boxed(), torch.classes.c10d.ReduceOp()
        with torch._C._ExcludeDispatchKeyGuard(hidden):  # (factory functions need that key: made outside)
            work = torch.ops.c10d.allreduce_([t], boxed, op, None, False)[1]
        work.wait()
        # The boxed group (a script object) must not hold the group's last reference: its release
        # keeps the GIL while the group's destructor joins gloo's thread, which may need the GIL to
        # free the finished work's tensors (a deadlock seen in this test, 2026-12-06).
        del work, boxed
        assert c.total == 5 and c.uncounted_since(mark) == 1  # (inactive: counted by nothing else)
        c._libraries["c10d"]._destroy()  # what a candidate reaching the Library object through gc could do
        assert "dispatcher c10d::allreduce_ (BackendSelect)" in snapshot.changed()
    finally:
        dist.destroy_process_group()
        c.uninstall()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("c10d::allreduce_", "BackendSelect")


def test_dist_counter_suspends_its_dispatcher_kernels_for_the_timed_loops(tmp_path):
    """In the timed loops the dispatcher kernels are away (their cost would fall on a launch-bound
    reference); a c10d operator called meanwhile shows in the sequence numbers; the kernels come
    back after, except where someone else registered one at that key meanwhile."""
    import torch.distributed as dist

    from pkb.eval.guard import DISPATCH_KEY, DistCounter

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    c = DistCounter()
    lib = None
    try:
        c.install()
        hooked = set(c.dispatcher_ops)
        group = dist.distributed_c10d._get_default_group()

        def c10d_allreduce():
            torch.ops.c10d.allreduce_([torch.ones(4)], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)[1].wait()

        c.active = True
        symm = sorted(op for op in hooked if op.startswith("symm_mem::"))
        with c.dispatcher_suspended():
            assert not torch._C._dispatch_has_kernel_for_dispatch_key("c10d::allreduce_", DISPATCH_KEY)
            assert not any(op.startswith(("c10d::", "_c10d_functional::")) for op in c.dispatcher_ops)
            mark = c.mark()
            c10d_allreduce()
            assert c.total == 0 and c.uncounted_since(mark) == 1
            # symmetric memory's operators number nothing: their kernels stay, and count
            assert sorted(c.dispatcher_ops) == symm
            if "symm_mem::one_shot_all_reduce" in symm:
                with pytest.raises(Exception):  # no kernel for CPU tensors below ours
                    torch.ops.symm_mem.one_shot_all_reduce(torch.ones(4), "sum", "0")
                assert c.counts == {"all_reduce": 1}, c.counts
                c.counts.clear()
        assert set(c.dispatcher_ops) == hooked
        c10d_allreduce()
        assert c.counts == {"all_reduce": 1}
        with c.dispatcher_suspended():  # a kernel of someone else's at that key meanwhile
            lib = torch.library.Library("c10d", "IMPL")
            lib.impl("allreduce_", lambda *a, **k: None, DISPATCH_KEY)
        assert "c10d::allreduce_" in hooked - set(c.dispatcher_ops)
    finally:
        if lib is not None:
            lib._destroy()
        dist.destroy_process_group()
        c.uninstall()


def test_sweep_kills_a_detached_process_with_the_marker(tmp_path):
    from pkb.eval.launcher import MARKER_ENV, sweep_strays

    env = {**os.environ, MARKER_ENV: "feedfacecafe"}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.3)
        killed = sweep_strays("feedfacecafe", set())
        assert p.pid in {k["pid"] for k in killed}
        assert p.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None  # no marker, not of the job: left alone
    finally:
        other.kill()
        other.wait()


def test_torchrun_failure_table_gives_signal_names():
    from pkb.eval.launcher import torchrun_exits

    log = "[0]:\n  time : x\n  rank      : 1 (local_rank: 1)\n  exitcode  : -11 (pid: 42)\n  error_file: <N/A>\n"
    assert torchrun_exits(log) == {1: {"exit_code": -11, "pid": 42, "signal": "SIGSEGV"}}


def _launch(ranks_results, timed_out=False):
    from pkb.eval.launcher import LaunchResult, RankReport

    ranks = [RankReport(rank=i, phase="done", result=r) for i, r in enumerate(ranks_results)]
    return LaunchResult(returncode=0, timed_out=timed_out, wall_s=1.0, ranks=ranks)


def _good_rank(rank, cand_event, cand_wall, ref_event=1.0, ref_wall=1.1, floor=None):
    stats = lambda e, w: {"event": {"median_ms": e}, "wall": {"median_ms": w}}
    return {
        "rank": rank, "finished": True, "error": None,
        "trials": [{"trial": 0, "matched": True, "values_close": True}],
        "timed_checks": [{"trial": 0, "matched": True}], "refresh_check": {"matched": True},
        "timing": {"reference": stats(ref_event, ref_wall), "candidate": stats(cand_event, cand_wall)},
        "speed_floor": floor or {"applies": False},
    }


def test_side_stream_rule_needs_ratio_and_absolute_gap():
    from pkb.eval.outcome import decide

    ev = decide(_launch([_good_rank(0, 0.01, 0.5), _good_rank(1, 0.01, 0.5)]))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "side_stream_timing")
    # 3x but only 20 us apart: host overhead of a tiny op, not hidden work
    ev = decide(_launch([_good_rank(0, 0.01, 0.03), _good_rank(1, 0.01, 0.03)]))
    assert ev["outcome"] in ("faster", "slower")
    # the reference's clocks disagree as much: the machine, not the candidate
    ev = decide(_launch([_good_rank(0, 0.1, 0.5, ref_event=0.1, ref_wall=0.5)] * 2))
    assert ev["outcome"] in ("faster", "slower")


def test_speed_of_light_floor_applies_only_where_it_can():
    from pkb.eval.outcome import decide

    floor = {"applies": True, "bytes": 45_000_000, "floor_ms": 0.1}
    ev = decide(_launch([_good_rank(0, 0.02, 0.03, floor=floor), _good_rank(1, 0.02, 0.03, floor=floor)]))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "speed_of_light")
    ev = decide(_launch([_good_rank(0, 0.06, 0.07, floor=floor), _good_rank(1, 0.06, 0.07, floor=floor)]))
    assert ev["outcome"] in ("faster", "slower")  # within 2x of the floor
    off = {"applies": False, "why": "world size 1: nothing crosses a link, the floor does not apply", "floor_ms": 0.1}
    ev = decide(_launch([_good_rank(0, 0.001, 0.002, floor=off)]))
    assert ev["outcome"] in ("faster", "slower")
    assert "does not apply" in ev["details"]["speed_floor"]["why"]


# ---- the sandbox's fallbacks and the OOM killer -------------------------------------------------------


def _one(tmp_path, name, monkeypatch, **env):
    from pkb.eval import sandbox

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    sandbox._choose.cache_clear()
    try:
        rec = read_candidate(HOSTILE / name)
        evaluate([rec], hostile_options(tmp_path, jobs=1))
    finally:
        sandbox._choose.cache_clear()
    return rec.evaluation


def test_without_a_sandbox_the_record_says_so_and_the_cgroup_still_holds_every_process(tmp_path, monkeypatch):
    from pkb.eval.sandbox import LaunchCgroup

    probe = LaunchCgroup.create("probe")
    if probe is None:
        pytest.skip("no memory cgroup can be made here")
    probe.remove()
    ev = _one(tmp_path, "1_allreduce_setsid_sleeper.py", monkeypatch, PKB_SANDBOX="none")
    box = ev["details"]["sandbox"]
    assert box["kind"] == "none" and box["fallback_reason"] == "PKB_SANDBOX=none"
    assert box["fallback"].startswith("harness files reachable") and box["harness_proc"].startswith(("closed", "open to a root"))
    pids = [int(p.read_text()) for p in Path(ev["job_dir"]).glob("scratch/rank*/sleeper.pid")]
    named = {s["pid"]: s for s in ev["details"]["stray_processes"]}
    assert pids and all(named[p]["cmdline"] == "sleep 3600" and named[p]["where"] == "cgroup" for p in pids), named
    _assert_nothing_left(ev, pids)


def test_a_rank_the_oom_killer_ends_is_out_of_memory_with_the_evidence(tmp_path, monkeypatch):
    from pkb.eval.sandbox import LaunchCgroup

    probe = LaunchCgroup.create("probe")
    if probe is None:
        pytest.skip("no memory cgroup can be made here: the OOM evidence needs one (or a readable kernel log)")
    probe.remove()
    ev = _one(tmp_path, "1_allreduce_oom_kernel.py", monkeypatch, PKB_SANDBOX_MEMORY_MAX=str(2 << 30))
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "out_of_memory"), ev["reason"]
    assert ev["details"]["oom_evidence"]["source"].endswith("counted in the launch's memory cgroup")
    assert "OOM killer" in ev["reason"]


def test_a_sandbox_killed_from_outside_is_an_environment_failure_retried_on_resume(tmp_path):
    """The sandbox's init can only be killed from outside it: the launch is not the candidate's
    outcome, is stored not_run, and the next run evaluates it again."""
    from pkb.eval import sandbox
    from pkb.eval.launcher import _descendants

    if sandbox.choose()[0] != "bwrap":
        pytest.skip(f"no bwrap sandbox here: {sandbox.choose()[1]}")
    import threading

    path = HOSTILE / "1_allreduce_sleep_past_limit.py"
    options = hostile_options(tmp_path, jobs=1, call_timeout_s=60.0)
    me = os.getpid()
    killed = []

    def kill_the_init():
        end = time.monotonic() + 60
        while time.monotonic() < end and not killed:
            for pid in _descendants({me}):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                argv = cmd.split(b"\0")
                if len(argv) > 3 and argv[3].endswith(b"sandbox_init.py") and b"rank_spawner.py" in cmd:  # not bwrap
                    time.sleep(8)  # the ranks are up
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.2)

    t = threading.Thread(target=kill_the_init)
    t.start()
    rec = read_candidate(path)
    evaluate([rec], options)
    t.join()
    assert killed
    ev = rec.evaluation
    assert ev["status"] == "not_run" and ev["reason"].startswith("environment:"), (ev["status"], ev["outcome"], ev["reason"])
    with Store(options.store_path) as store:
        assert not store.done(rec.sha256, ev["config_key"])  # a resume runs it again


# ---- exit codes --------------------------------------------------------------------------------------


def _cli(args, tmp):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    base = [sys.executable, "-m", "pkb", "eval", *map(str, args), "--out", str(tmp / "out"), "--store", str(tmp / "cli.sqlite"), "--work-dir", str(tmp / "w"),
            "--world-size", "2", "--backend", "gloo", "--dtype", "float32"]
    return subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_exit_codes(tmp_path):
    assert _cli([tmp_path / "no_such_file.py"], tmp_path).returncode == 2
    assert _cli([HOSTILE / "1_allreduce_empty.py"], tmp_path).returncode == 0  # evaluated: load_error
    if not torch.cuda.is_available():
        out = _cli([HOSTILE / "1_allreduce_illegal_address_cuda.py"], tmp_path)  # needs a GPU: not_run
        assert out.returncode == 1, out.stdout + out.stderr
        assert "could not be evaluated" in out.stderr


# ---- on a GPU ------------------------------------------------------------------------------------

GPU_ENTRIES = [e for e in MANIFEST if e["needs_gpu"] or e["path"] in ("1_allreduce_oom.py", "1_allreduce_segfault.py", "1_allreduce_ctypes_nccl.py")]
# An entry whose trick only shows across GPUs (a speed-of-light floor is zero bytes at world size 1)
# says so with min_world_size; it is left out where fewer GPUs are visible.


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the CUDA-only hostile candidates, on NCCL")
def test_gpu_hostile_candidates_and_a_healthy_context_after_them(tmp_path):
    """The GPU-only entries on the real path (NCCL, every visible GPU), then a correct CUDA
    candidate of the bundled corpus: it must still build, run and be correct after an illegal
    address, an out-of-memory and a segfault in the launches before it."""
    healthy = REPO / "corpus" / "solutions_cuda_fp32_h100_8_pkb_sample-c" / "1_allreduce_cuda.py"
    entries = sorted((e for e in GPU_ENTRIES if e.get("min_world_size", 1) <= torch.cuda.device_count()), key=lambda e: e["path"])
    records = [read_candidate(HOSTILE / e["path"]) for e in entries] + [read_candidate(healthy)]
    options = hostile_options(tmp_path, world_size=None, backend="nccl", jobs=1, timeout_s=300.0,
                              compile_timeout_s=240.0)
    evaluate(records, options)
    wrong = []
    for e, rec in zip(entries, records):
        ev = rec.evaluation
        got = (ev["status"], ev["outcome"], ev["subtype"])
        if ev["status"] != "ran" or ev["outcome"] not in e["outcome"].split("|") or e["subtype"] not in ("*", ev["subtype"]):
            wrong.append(f"{e['path']}: expected {e['outcome']}/{e['subtype']}, got {got}: {ev.get('reason')}")
    last = records[-1].evaluation
    assert not wrong, "\n".join(wrong)
    assert last["status"] == "ran" and last["outcome"] in ("faster", "slower"), (last["outcome"], last.get("reason"))


# ---- soak ----------------------------------------------------------------------------------------------


def _bundled_records():
    manifest = tomllib.loads((REPO / "corpus" / "manifest.toml").read_text())["candidate"]
    problem_of = {e["path"]: e.get("problem") for e in manifest}
    records = []
    for rec in load_corpus(REPO / "corpus"):
        if rec.path.startswith("hostile/"):
            continue
        if rec.problem_id is None and problem_of.get(rec.path):
            rec.problem_id = int(problem_of[rec.path])
        records.append(rec)
    return records


def _outcome_class(outcome: str) -> str:
    return "correct" if outcome in ("faster", "slower") else outcome


def test_soak_bundled_pure_pytorch_candidates_three_times_identical(tmp_path):
    """Runs in CI: on CPU only the pure-PyTorch ones launch (one today), the rest are decided
    not runnable without a launch; three fresh runs must agree candidate by candidate."""
    from pkb.eval.device_needs import cuda_requirement

    runs = []
    for i in range(3):
        records = _bundled_records()
        evaluate(records, hostile_options(tmp_path / f"run{i}", trials=2, jobs=2, timeout_s=120.0))
        # faster vs slower is a measurement with noise (a speedup near 1 flips); everything
        # else must be identical: status, correctness, outcome class and subtype
        runs.append({r.path: (r.evaluation["status"], _outcome_class(r.evaluation["outcome"]), r.evaluation["subtype"]) for r in records})
    assert runs[0] == runs[1] == runs[2]
    pure = [r for r in _bundled_records() if r.source and not cuda_requirement(r.source)]
    assert pure, "no pure-PyTorch candidate in the bundled corpus"
    for r in pure:
        assert runs[0][r.path][0] == "ran", (r.path, runs[0][r.path])


def test_no_input_reaches_the_candidate_at_an_address_it_saw_with_other_values(tmp_path):
    """The invariant that keeps a pointer-keyed cache from deadlocking the ranks: outside the timed
    loops every input the candidate is handed sits at an address it has not seen with other
    contents, except the refresh probe's (new values at the old addresses, on every rank alike).
    Before inputs were kept alive, the allocator reused trial addresses on one rank and not the
    other. Inside the timed loops each group's buffers come back with edited contents
    (pkb.eval.timing.InputEdits), in the same order of addresses on every rank."""
    body = '''
import sys

import torch
import torch.distributed as dist

_seen = open(f"seen_rank{dist.get_rank()}.log", "a")  # in its scratch folder: the only place it may write


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "time_calls":
            return True
        frame = frame.f_back
    return False


@torch.no_grad()
def solution(x):
    print(int(_timed()), x.data_ptr(), float(x.double().sum()), file=_seen, flush=True)
    out = x.clone()
    dist.all_reduce(out)
    return out
'''
    path = tmp_path / "cands" / "1_allreduce_logs_addresses.py"
    path.parent.mkdir()
    path.write_text(body)
    rec = read_candidate(path)
    evaluate([rec], hostile_options(tmp_path, trials=4, iters=2, groups=3, jobs=1))
    assert rec.evaluation["outcome"] in ("faster", "slower"), rec.evaluation.get("reason")
    logs = sorted(Path(rec.evaluation["job_dir"]).glob("scratch/rank*/seen_rank*.log"))
    assert len(logs) == 2
    timed_orders = []
    for log in logs:
        contents: dict[int, set[float]] = {}
        order: list[int] = []
        for line in log.read_text().splitlines():
            timed, ptr, total = line.split()
            if timed == "1":
                order.append(int(ptr))
                continue
            contents.setdefault(int(ptr), set()).add(float(total))
        calls = sum(len(v) for v in contents.values())
        reused = {p: v for p, v in contents.items() if len(v) > 1}
        assert calls >= 4 + 1, (log.name, calls)  # trials and the repeat
        assert len(reused) == 1 and len(next(iter(reused.values()))) == 2, (log.name, reused)
        assert 1 < len(set(order)) <= 3, (log.name, order)  # the timing groups' buffers (warm-up, 2 calls)
        timed_orders.append([sorted(set(order), key=order.index).index(p) for p in order])
    assert timed_orders[0] == timed_orders[1]


def _hung_launch(error_at: float, expired_since: float = 100.0):
    """Rank 1 past its call limit (the watchdog marked it at `expired_since`); rank 0's collective
    raised at `error_at`."""
    from pkb.eval.launcher import LaunchResult, RankReport

    error = {"outcome": "runtime_error", "subtype": "nccl_error", "source": "candidate", "phase": "trial 0 candidate",
             "type": "RuntimeError", "message": "Connection closed by peer", "at": error_at}
    ranks = [RankReport(rank=0, phase="trial 0 candidate", result={"rank": 0, "finished": False, "error": error}),
             RankReport(rank=1, phase="trial 0 candidate", result={"rank": 1, "finished": False, "error": None})]
    return LaunchResult(returncode=-9, timed_out=True, wall_s=12.0, ranks=ranks,
                        phase_timeout={"rank": 1, "phase": "trial 0 candidate", "limit_s": 10.0, "since": expired_since})


def test_a_peer_error_after_a_rank_went_past_its_limit_is_the_hangs_echo():
    # the barrier deadlock on a loaded machine: rank 1 is killed at its limit and rank 0's barrier
    # then fails with "remote worker crashing" before rank 0 is killed too
    from pkb.eval.outcome import decide

    ev = decide(_hung_launch(error_at=100.4))
    assert (ev["outcome"], ev["subtype"]) == ("hang", "timeout")
    assert ev["details"]["phase_timeout"]["rank"] == 1
    assert ev["details"]["errors_after_the_hang"] == [0]


def test_an_error_before_a_peer_went_past_its_limit_is_the_cause():
    # rank 0 failed first; rank 1 then waited for it in a collective until its limit
    from pkb.eval.outcome import decide

    ev = decide(_hung_launch(error_at=97.0))
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "nccl_error")
