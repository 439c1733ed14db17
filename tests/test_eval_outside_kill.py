"""A rank SIGKILLed by something other than the harness or the OOM killer (CPU, gloo, 2 ranks).

The cause is decided from evidence the harness owns: its own kill (a timeout), the OOM killer
(the launch cgroup's OOM-kill counter; else the kernel's counter and log; else the largest
process's peak RSS, from wait4, against the memory the launch had), else a kill from outside:
an environment failure, stored not_run and evaluated again on resume. A candidate that SIGKILLs
its own rank to dodge a verdict is charged on the second such death (the count is in the store).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pkb.corpus import read_candidate
from pkb.eval import EvalOptions, evaluate
from pkb.eval import job as jobfiles
from pkb.eval import sandbox
from pkb.store import Store

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO / "corpus" / "hostile"

# Right answer; the first call sleeps, so an outside kill can land while the rank is in it.
SLOW_FIRST_CALL = '''import time

import torch
import torch.distributed as dist

_calls = [0]


@torch.no_grad()
def solution(x):
    _calls[0] += 1
    if _calls[0] == 1:
        time.sleep(6)
    out = x.clone()
    dist.all_reduce(out)
    return out
'''


def _options(tmp: Path, **over) -> EvalOptions:
    base = dict(world_size=2, trials=2, dtype="float32", backend="gloo", timeout_s=120.0, warmup=1, iters=3, groups=2,
                store_path=str(tmp / "eval.sqlite"), work_dir=str(tmp / "work"), jobs=1, call_timeout_s=30.0,
                import_timeout_s=30.0, compile_timeout_s=30.0, screen=False)
    base.update(over)
    return EvalOptions(**base)


def _rank_pids(work: Path) -> dict[int, int]:
    """rank -> pid as this process sees it: the job's processes whose pid in their own namespace
    (the last NSpid field; the pid itself outside a sandbox) is one a rank wrote in its status
    file, whatever the ranks' command lines and environments look like."""
    out = {}
    for job in work.glob("jobs/*"):
        by_inner = {}
        for rank_status in job.glob("*status*"):
            data = jobfiles.read_json(rank_status) or {}
            if "rank" in data and "pid" in data:
                by_inner[int(data["pid"])] = int(data["rank"])
        for pid in sandbox.processes_of_job(job):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            nspid = next((line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:")), str(pid))
            if int(nspid) in by_inner:
                out[by_inner[int(nspid)]] = pid
    return out


def _kill_rank_in_first_call(work: Path, killed: list[int], rank: int = 1, limit_s: float = 90.0) -> None:
    """From a thread of the test: SIGKILL `rank` once it is in the candidate's first call."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        for job in work.glob("jobs/*"):
            status = jobfiles.read_json(jobfiles.status_path(job, rank)) or {}
            if str(status.get("phase", "")).startswith("trial 0 candidate"):
                pid = _rank_pids(work).get(rank)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
        time.sleep(0.1)


def test_a_rank_killed_from_outside_is_not_run_and_runs_again_on_resume(tmp_path):
    cand = tmp_path / "1_allreduce_slow_first_call.py"
    cand.write_text(SLOW_FIRST_CALL)
    options = _options(tmp_path)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_rank_in_first_call, args=(tmp_path / "work", killed))
    killer.start()
    rec = read_candidate(cand)
    evaluate([rec], options)
    killer.join()
    assert killed, "the rank never reached its first call"
    ev = rec.evaluation
    assert ev["status"] == "not_run" and ev["outcome"] == "", (ev["status"], ev["outcome"], ev["reason"])
    assert "killed from outside (signal 9), not by the harness" in ev["reason"], ev["reason"]
    assert ev["details"]["outside_kills"] == 1 and ev["details"]["environment_failure"]
    with Store(options.store_path) as store:
        assert not store.done(rec.sha256, ev["config_key"])
        assert store.evaluation(rec.sha256, ev["config_key"])["details"]["outside_kills"] == 1
    again = read_candidate(cand)
    evaluate([again], options)  # the resume: nothing kills it this time
    assert again.evaluation["status"] == "ran" and again.evaluation["outcome"] in ("faster", "slower"), again.evaluation["reason"]
    assert "outside_kills" not in again.evaluation["details"]


def test_a_candidate_that_kills_its_own_rank_twice_is_charged(tmp_path):
    options = _options(tmp_path)
    first = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([first], options)
    ev = first.evaluation
    assert ev["status"] == "not_run" and "killed from outside (signal 9)" in ev["reason"], (ev["status"], ev["reason"])
    assert ev["details"]["peak_rss_bytes"] > 50 << 20  # torch imported: the kernel's figure for the largest process
    second = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([second], options)
    ev2 = second.evaluation
    assert (ev2["status"], ev2["outcome"]) == ("ran", "runtime_error"), (ev2["status"], ev2["outcome"], ev2["reason"])
    assert ev2["reason"].startswith("rank killed by SIGKILL twice; not by the harness or the OOM killer"), ev2["reason"]
    assert ev2["details"]["outside_kills"] == 2 and ev2["details"]["signal"] == "SIGKILL"
    with Store(options.store_path) as store:
        assert store.done(second.sha256, ev2["config_key"])
    third = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([third], options)
    assert third.evaluation["status"] == "skipped_cached" and third.evaluation["outcome"] == "runtime_error"


def test_an_oom_kill_counted_in_a_fake_memory_events_is_out_of_memory(tmp_path, monkeypatch):
    """The cgroup's counter is the evidence: a memory.events whose oom_kill rises during the
    launch (written here, since no OOM can be caused safely on a shared machine) names the OOM
    killer, and the candidate is charged at once (no retry)."""
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    finish = sandbox.Sandbox.finish

    def finish_after_an_oom_kill(self, proc, known=None):
        events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")  # the kernel counted one kill in the launch
        return finish(self, proc, known)

    made = sandbox.LaunchCgroup.create("probe")
    if made is None:
        pytest.skip("no memory cgroup can be made here")
    made.remove()
    monkeypatch.setattr(sandbox.LaunchCgroup, "oom_kills", lambda self: sandbox.oom_kill_count(events.read_text()))
    monkeypatch.setattr(sandbox.Sandbox, "finish", finish_after_an_oom_kill)
    rec = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([rec], _options(tmp_path))
    ev = rec.evaluation
    assert (ev["status"], ev["outcome"], ev["subtype"]) == ("ran", "runtime_error", "out_of_memory"), ev["reason"]
    assert "OOM killer" in ev["reason"] and "outside_kills" not in ev["details"]


def test_without_a_cgroup_or_kernel_counter_the_peak_rss_decides(tmp_path, monkeypatch):
    """No cgroup, no readable kernel counter or log: the largest process's peak RSS (wait4's
    figure) against the memory the launch had when it started. The memory figure is set here;
    the peak is the rank's real one."""
    monkeypatch.setenv("PKB_SANDBOX_CGROUP", "0")
    monkeypatch.setattr(sandbox, "kernel_oom_kill_count", lambda: None)
    monkeypatch.setattr(sandbox, "oom_killed_in_kernel_log", lambda pids: [])
    monkeypatch.setattr(sandbox, "memory_headroom", lambda: (200 << 20, "a test's figure"))
    rec = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([rec], _options(tmp_path))
    ev = rec.evaluation
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "out_of_memory"), ev["reason"]
    assert "peak RSS" in ev["details"]["oom_evidence"]["source"], ev["details"]["oom_evidence"]
    # with room to spare, the same death is a kill from outside
    monkeypatch.setattr(sandbox, "memory_headroom", lambda: (1 << 40, "a test's figure"))
    rec2 = read_candidate(HOSTILE / "1_allreduce_sigkill_self.py")
    evaluate([rec2], _options(tmp_path / "roomy"))
    assert rec2.evaluation["status"] == "not_run" and "killed from outside" in rec2.evaluation["reason"], rec2.evaluation["reason"]
