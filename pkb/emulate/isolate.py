"""One emulated evaluation per process: the parent's side (the child is pkb.emulate.child).

A candidate under emulation runs inside the process of its virtual world, and a candidate can
do anything to that process: exit, segfault, leave a kernel spinning that makes the CUDA
context unusable. So each candidate gets a process of its own, in a session of its own, with a
wall limit; the parent reads the record the child wrote, or makes one from what it saw: the
exit status, the phase the child had reached, and, for a child that stopped answering, every
rank's Python stack (faulthandler on SIGUSR1) before the whole session is killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pkb.eval.interrupt import raise_if_requested

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_GRACE_S = 3.0  # for faulthandler to write the stacks after SIGUSR1
POLL_S = 0.2  # how often a waiting parent looks for Ctrl-C


def outer_limit(job: dict[str, Any]) -> float:
    """The child's wall limit: its own limits (load, every step, one build) plus a margin; only
    a child that stops answering altogether (stuck outside a step) reaches it."""
    call = float(job.get("call_timeout_s") or 60.0)
    steps = 3 * int(job.get("trials", 3)) + 4  # inputs, reference, poison, candidate (+ repeat) per trial
    return float(job.get("load_timeout_s", 900.0)) + float(job.get("compile_timeout_s", 900.0)) + steps * call + 120.0


def run_child(job: dict[str, Any], job_dir: Path, *, wall_limit_s: float | None = None, python: str | None = None) -> dict[str, Any]:
    """Run one emulated evaluation in its own process; always returns an evaluation dict."""
    raise_if_requested()  # queued behind a Ctrl-C: never started
    job_dir.mkdir(parents=True, exist_ok=True)
    job = dict(job)
    paths = {k: str(job_dir / name) for k, name in (
        ("result_path", "result.json"), ("stacks_path", "stacks.txt"), ("progress_path", "progress.json"))}
    job.update(paths)
    for p in paths.values():
        Path(p).unlink(missing_ok=True)
    job_file = job_dir / "job.json"
    job_file.write_text(json.dumps(job, default=str), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONFAULTHANDLER", "1")
    limit = wall_limit_s if wall_limit_s is not None else outer_limit(job)
    t0 = time.monotonic()
    with open(job_dir / "stdout.txt", "wb") as out, open(job_dir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen([python or sys.executable, "-m", "pkb.emulate.child", str(job_file)],
                                stdout=out, stderr=err, env=env, cwd=str(job_dir), start_new_session=True)
        killed = False
        try:
            rc = _wait(proc, t0 + limit)
        except subprocess.TimeoutExpired:
            killed = True
            _dump_stacks(proc)
            _kill_session(proc)
            rc = proc.wait()
        finally:  # Ctrl-C (Interrupted) ends up here too: the session is killed, the interruption goes on
            if proc.poll() is None:
                _kill_session(proc)
                proc.wait()
    _kill_session(proc)  # anything the candidate left behind in its session (an nvcc, a fork)
    wall = time.monotonic() - t0
    result = Path(paths["result_path"])
    if result.is_file():  # written last: a child killed after it (stuck in its exit) still answered
        try:
            record = json.loads(result.read_text(encoding="utf-8"))
            record.setdefault("details", {})["process"] = {"returncode": rc, "wall_s": round(wall, 3), "killed_at_limit": killed}
            return record
        except (OSError, json.JSONDecodeError):
            pass
    progress = _read_json(paths["progress_path"])
    stderr_tail = _tail(job_dir / "stderr.txt")
    stacks = parse_stacks(_read_text(paths["stacks_path"]), progress.get("rank_threads") or {})
    return died_record(job, rc, killed, limit, wall, progress.get("phase", ""), stacks, stderr_tail)


def _wait(proc: subprocess.Popen, deadline: float) -> int:
    """The child's exit status, waited for in short steps so that Ctrl-C (pkb.eval.interrupt)
    stops it at once; TimeoutExpired at the deadline."""
    while True:
        raise_if_requested()
        try:
            return proc.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise


def died_record(job: dict[str, Any], rc: int | None, killed: bool, limit: float, wall: float, phase: str,
                stacks: list[dict[str, Any]], stderr_tail: str) -> dict[str, Any]:
    """The evaluation of a child that left no record: killed at the wall limit, or dead."""
    from pkb.eval.classify import runtime_subtype

    details: dict[str, Any] = {"process": {"returncode": rc, "wall_s": round(wall, 3), "killed_at_limit": killed},
                               "stderr_tail": stderr_tail[-4000:]}
    base = {"emulated": True, "status": "ran", "speedup": None, "timing": None, "correct": False,
            "world_size": int(job.get("world_size", 0)), "backend": "emulated", "dtype": job.get("dtype") or "",
            "candidate_path": job.get("candidate_path", ""), "trials": [], "ranks": [], "details": details,
            "wall_s": round(wall, 3)}
    where = "; ".join(f"rank {s['rank']} at {s['where']}" for s in stacks if s.get("rank") is not None)
    if stacks:
        details["stuck_ranks"] = stacks
    if killed:
        return {**base, "outcome": "hang", "subtype": "timeout",
                "reason": f"{phase or 'start-up'}: the emulation process gave no answer in {limit:.0f} s; killed"
                          + (f"; {where}" if where else "")}
    sig = -rc if rc is not None and rc < 0 else None
    if sig:
        details["signal"] = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
    how = f"killed by {details['signal']}" if sig else f"exited with code {rc}"
    return {**base, "outcome": "runtime_error", "subtype": runtime_subtype(stderr_tail) or "crash",
            "reason": f"the emulation process {how} in {phase or 'start-up'} without a report" + (f"; {where}" if where else "")}


_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def parse_stacks(text: str, rank_threads: dict[str, int]) -> list[dict[str, Any]]:
    """faulthandler's dump as [{rank, thread, where, stack}]; rank threads only where they are known."""
    from pkb.emulate.world import where_in

    threads: list[tuple[str, list[dict[str, Any]]]] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append((m.group(1), []))
            continue
        f = _FRAME.match(line)
        if f and threads:
            threads[-1][1].append({"file": f["file"], "line": int(f["line"]), "function": f["function"]})
    ranks = {int(k, 16): v for k, v in rank_threads.items()}
    out = []
    for ident, frames in threads:
        frames = list(reversed(frames))  # faulthandler prints the innermost first
        rank = ranks.get(int(ident, 16))
        if rank_threads and rank is None:
            continue
        out.append({"rank": rank, "thread": ident, "where": where_in(frames), "stack": frames[-40:]})
    return sorted(out, key=lambda s: (s["rank"] is None, s["rank"] or 0))


def _dump_stacks(proc: subprocess.Popen) -> None:
    try:
        os.kill(proc.pid, signal.SIGUSR1)  # the child only: SIGUSR1 would end an nvcc it started
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STACK_GRACE_S
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_json(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {"phase": str(data)}


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _tail(path: Path, n: int = 8000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", errors="replace")
