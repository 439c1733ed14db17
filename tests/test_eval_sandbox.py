"""The sandbox around a launch, without the ranks: a small probe runs where a launch would and
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



# The harness side of a plain-process launch, run as a user of its own where we are root (root
# reads any process's /proc/<pid>/fd, non-dumpable or not): it holds an unnamed file, as the judge
# holds the ranks' reference outputs, and launches a probe that tries it through /proc/<ppid>/fd.
HARNESS = r"""
import importlib.util, json, os, subprocess, sys, tempfile
spec = importlib.util.spec_from_file_location("sandbox_under_test", sys.argv[1])
sandbox = sys.modules["sandbox_under_test"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sandbox)
held = tempfile.TemporaryFile()
held.write(b"the reference output")
held.flush()
probe = ("import os, sys\n"
         "try:\n    print(open(f'/proc/{os.getppid()}/fd/{sys.argv[1]}', 'rb').read().decode())\n"
         "except OSError as exc:\n    print(type(exc).__name__)\n")
box = sandbox.for_job([], [], [], "fallback-probe")
proc = subprocess.Popen(box.wrap([sys.executable, "-c", probe, str(held.fileno())], sys.executable, "/"),
                        stdout=subprocess.PIPE, text=True, pass_fds=box.pass_fds)
box.started()
seen = proc.stdout.read().strip()
report = box.finish(proc)
print(json.dumps({"seen": seen, "report": report}))
"""


def test_the_plain_process_fallback_closes_the_harness_descriptors_and_says_what_stays_reachable(tmp_path):
    import os
    import shutil
    import stat
    import tempfile

    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root here and no setpriv to run the harness as another user")
    folder = Path(tempfile.mkdtemp(prefix="pkb-fallback-"))
    try:
        folder.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        harness = folder / "harness.py"
        harness.write_text(HARNESS)
        harness.chmod(0o644)
        # a copy the other user can read: the checkout may sit in a folder only we may enter
        # (a clone under mktemp -d is 0700); sandbox.py imports nothing of the project
        module = folder / "sandbox.py"
        shutil.copyfile(REPO / "pkb" / "eval" / "sandbox.py", module)
        module.chmod(0o644)
        as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
        python = "/usr/bin/python3" if as_user else sys.executable  # one the other user may run
        env = {**os.environ, "PKB_SANDBOX": "none", "PKB_SANDBOX_CGROUP": "0"}
        res = subprocess.run([*as_user, python, str(harness), str(module)],
                             capture_output=True, text=True, timeout=60, cwd=folder, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert out["seen"] == "PermissionError"  # not the held file's text
    report = out["report"]
    assert report["kind"] == "none" and report["harness_proc"].startswith("closed")
    assert report["fallback"].startswith("harness files reachable: the store")


def test_each_fallback_says_what_it_leaves_reachable():
    for kind in ("none", "unshare"):
        assert sandbox.REACHABLE[kind].startswith("harness files reachable")
    assert "bwrap" not in sandbox.REACHABLE


# What a process inside the unshare walls may open for writing in /proc: its own threads' entries
# (the CUDA driver names its threads at cuInit) but none of the machine's. Opened, never written.
PROC_PROBE = r"""
import errno, json, os, threading
def opens(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
tid = threading.get_native_id()
print(json.dumps({"comm": opens(f"/proc/self/task/{tid}/comm"), "sysctl": opens("/proc/sys/vm/drop_caches"),
                  "repo": opens(os.path.join(os.getcwd(), "pyproject.toml"))}))
"""


@pytest.fixture()
def unshare_walls(monkeypatch):
    import os
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("the unshare walls need root (mounts without a user namespace)")
    monkeypatch.setenv("PKB_SANDBOX", "unshare")
    monkeypatch.setenv("PKB_SANDBOX_ENCLOSE", "1")
    sandbox._choose.cache_clear()
    sandbox.walls_break_cuda.cache_clear()
    kind, why = sandbox.choose()
    if kind != "unshare":
        pytest.skip(f"unshare does not start here: {why}")
    yield
    sandbox._choose.cache_clear()
    sandbox.walls_break_cuda.cache_clear()


def _launch_in(box: sandbox.Sandbox, cmd: list[str], cwd: str) -> tuple[str, dict]:
    proc = subprocess.Popen(box.wrap(cmd, sys.executable, cwd), stdout=subprocess.PIPE, text=True, cwd=cwd,
                            pass_fds=box.pass_fds, preexec_fn=box.preexec, start_new_session=True)
    box.started()
    out = proc.stdout.read()
    proc.stdout.close()
    return out, box.finish(proc)


def test_inside_the_unshare_walls_a_process_names_its_threads_but_cannot_write_the_machines_proc(tmp_path, unshare_walls):
    box = sandbox.for_job(writable=[str(tmp_path)], readonly=[str(REPO)], hidden=[], name="proc-probe")
    out, report = _launch_in(box, [sys.executable, "-c", PROC_PROBE], str(REPO))
    assert report["isolates"] == sandbox.ENCLOSED_UNSHARE[0], report  # the walls were up
    seen = json.loads(out)
    assert seen["comm"] == "ok"
    assert seen["sysctl"] == "EROFS" and seen["repo"] == "EROFS"


def test_the_walls_come_off_with_the_reason_where_they_break_the_probe(tmp_path, unshare_walls, monkeypatch):
    # A stand-in for cuInit that, like it, works in a plain child and needs what the walls take
    # away (here a writable /proc/sys, which they keep read-only).
    monkeypatch.setattr(sandbox, "CUDA_PROBE", "import os\nos.close(os.open('/proc/sys/vm/drop_caches', os.O_WRONLY))\n")
    box = sandbox.for_job(writable=[str(tmp_path)], readonly=[str(REPO)], hidden=[], name="walls-off")
    out, report = _launch_in(box, [sys.executable, "-c", PROC_PROBE], str(REPO))
    assert report["walls_off"].startswith("the unshare walls left off") and "probe exit 1" in report["walls_off"], report
    assert report["isolates"] == sandbox.ISOLATES["unshare"]  # said as the PID namespace alone
    assert json.loads(out)["sysctl"] == "ok"


def test_the_walls_stay_where_the_probe_fails_outside_them_too(tmp_path, unshare_walls, monkeypatch):
    monkeypatch.setattr(sandbox, "CUDA_PROBE", "import sys\nsys.exit(3)\n")  # no driver library: no GPU to lose
    box = sandbox.for_job(writable=[str(tmp_path)], readonly=[str(REPO)], hidden=[], name="walls-kept")
    _, report = _launch_in(box, [sys.executable, "-c", "print('{}')"], str(REPO))
    assert "walls_off" not in report and report["isolates"] == sandbox.ENCLOSED_UNSHARE[0]


def test_a_writable_folder_exists_before_the_walls_go_up(tmp_path):
    """unshare's init binds writable only what exists; a candidate's own build folder that no
    prebuild made yet (a candidate without extensions) was read-only inside on the GPU machine,
    and every such launch failed in its load (2026-12-07). for_job makes them first."""
    own = tmp_path / "builds" / "candidates" / "0123456789abcdef"
    sandbox.for_job(writable=[str(own)], readonly=[], hidden=[], name="mkdirs")
    assert own.is_dir()
