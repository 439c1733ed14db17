"""The sandbox around a launch, without torchrun: a small probe runs where a launch would and
reports what it can see, write and signal. Skipped where bwrap cannot start (the record's
fallback then says why, which test_hostile checks)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pkb.eval import sandbox

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, signal, socket, sys
store, work, job, other_job, repo = sys.argv[1:6]
out = {"pid": os.getpid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
def can_write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return True
    except OSError:
        return False
out["write_job"] = can_write(os.path.join(job, "scratch", "ok.txt"))
out["write_repo"] = can_write(os.path.join(repo, "planted.txt"))
out["write_other_job"] = can_write(os.path.join(other_job, "planted.txt"))
out["other_job_visible"] = os.path.exists(other_job)
try:
    out["store_bytes"] = len(open(store, "rb").read())
except OSError as exc:
    out["store_bytes"] = exc.strerror
out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
try:
    os.kill(1, signal.SIGKILL)
    out["kill_init"] = "sent"
except OSError as exc:
    out["kill_init"] = str(exc)
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def kind():
    sandbox._choose.cache_clear()
    k, why = sandbox.choose()
    if k != "bwrap":
        pytest.skip(f"bwrap does not start here: {why}")
    return k


def _run_probe(tmp_path: Path) -> tuple[dict, dict]:
    work = tmp_path / "work"
    job = work / "jobs" / "mine"
    other = work / "jobs" / "theirs"
    for d in (job / "scratch", other):
        d.mkdir(parents=True)
    store = tmp_path / "pkb_eval.sqlite"
    store.write_bytes(b"s" * 100)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    box = sandbox.for_job(writable=[str(job)], readonly=[str(REPO), str(tmp_path)], hidden=[str(store), str(work)], name="probe")
    cmd = [sys.executable, str(probe), str(store), str(work), str(job), str(other), str(REPO)]
    proc = subprocess.Popen(box.wrap(cmd, sys.executable, str(job / "scratch")), stdout=subprocess.PIPE, text=True,
                            pass_fds=box.pass_fds, preexec_fn=box.preexec, start_new_session=True)
    box.started()
    line = proc.stdout.readline()
    proc.stdout.close()
    report = box.finish(proc)
    return json.loads(line), report


def test_the_launch_sees_only_its_own_world(tmp_path, kind):
    seen, report = _run_probe(tmp_path)
    assert seen["pids"] == [1, seen["pid"]] and seen["pid"] == 2  # the init and itself
    assert seen["write_job"] and (tmp_path / "work" / "jobs" / "mine" / "scratch" / "ok.txt").exists()
    assert not seen["write_repo"] and not (REPO / "planted.txt").exists()
    assert not seen["other_job_visible"] and not seen["write_other_job"]
    assert seen["store_bytes"] in (0, "No such file or directory", "Permission denied")  # hidden: /dev/null over it
    assert seen["interfaces"] == ["lo"]
    assert seen["caps"] == "0000000000000000"
    assert report["kind"] == "bwrap" and report["init_exit"] == 0 and not report["init_killed"]
    assert report["strays"] == []


def test_the_init_ignores_the_candidates_signals_and_reports_the_exit(tmp_path, kind):
    seen, report = _run_probe(tmp_path)
    assert seen["kill_init"] == "sent"  # delivered nowhere: the init has no handler
    assert report["init_exit"] == 0  # it lived to report the command's exit


def test_fallback_is_chosen_and_said_when_forced(monkeypatch):
    monkeypatch.setenv("PKB_SANDBOX", "none")
    sandbox._choose.cache_clear()
    try:
        assert sandbox.choose() == ("none", "PKB_SANDBOX=none")
        box = sandbox.for_job([], [], [], "x")
        assert box.wrap(["true"], sys.executable, "/") == ["true"]
    finally:
        sandbox._choose.cache_clear()
        if box.cgroup is not None:
            box.cgroup.remove()


def test_processes_of_job_finds_by_job_file(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(job / "job.json")])
    try:
        for _ in range(100):  # until the child has exec'd (its command line names the job)
            if sandbox.processes_of_job(job):
                break
            time.sleep(0.05)
        assert sandbox.processes_of_job(job) == [p.pid]
    finally:
        p.kill()
        p.wait()
    assert sandbox.processes_of_job(job) == []

