"""One torchrun launch per (problem, candidate), with a wall-clock limit for the whole job.

torchrun starts each rank in a session of its own, so killing torchrun's process group does not
reach the ranks: on timeout the launcher signals torchrun's group and every rank's group (their
pids come from the ranks' status files and from /proc), SIGTERM first, SIGKILL after a grace.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pkb.eval.job import (
    JobSpec,
    launcher_log_path,
    log_paths,
    read_json,
    result_path,
    status_path,
)

TAIL_CHARS = 4000
KILL_GRACE_S = 3.0
POLL_S = 0.1
_PORT_IN_USE = ("address already in use", "EADDRINUSE", "Address in use")


@dataclass
class RankReport:
    rank: int
    phase: str  # the last phase the rank reported ('' when it never started)
    result: dict[str, Any] | None
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def finished(self) -> bool:
        return bool(self.result and self.result.get("finished"))


@dataclass
class LaunchResult:
    returncode: int | None
    timed_out: bool
    wall_s: float
    ranks: list[RankReport]
    launcher_tail: str = ""
    command: list[str] = field(default_factory=list)

    @property
    def stuck(self) -> list[dict[str, Any]]:
        """Ranks that had neither finished nor failed when the job was killed."""
        if not self.timed_out:
            return []
        return [
            {"rank": r.rank, "phase": r.phase or "not started"}
            for r in self.ranks
            if not r.finished and not (r.result and r.result.get("error"))
        ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(job_file: Path, world_size: int, port: int, python: str | None = None) -> list[str]:
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(world_size),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "-m",
        "pkb.eval.worker",
        str(job_file),
    ]


def prepare_job_dir(job_dir: Path) -> None:
    """A fresh directory: stale verdict or result files from an earlier launch must not count."""
    if job_dir.exists():
        shutil.rmtree(job_dir)
    job_dir.mkdir(parents=True)


def clear_stale_build_locks(extensions_dir: str, older_than_s: float) -> list[str]:
    """torch's JIT build lock is a plain file (torch/utils/file_baton.py): a builder killed while
    holding it leaves it behind and every later build of that extension waits on it forever."""
    removed = []
    root = Path(extensions_dir)
    if not extensions_dir or not root.is_dir():
        return removed
    now = time.time()
    for lock in root.glob("*/lock"):
        try:
            if now - lock.stat().st_mtime > older_than_s:
                lock.unlink()
                removed.append(str(lock))
        except OSError:
            pass
    return removed


def launch(job: JobSpec, python: str | None = None, retries_on_port_clash: int = 2) -> LaunchResult:
    job_dir = Path(job.job_dir)
    for attempt in range(retries_on_port_clash + 1):
        result = _launch_once(job, job_dir, python)
        port_clash = result.returncode not in (0, None) and any(s in result.launcher_tail for s in _PORT_IN_USE)
        if not port_clash or attempt == retries_on_port_clash:
            return result
    return result


def _launch_once(job: JobSpec, job_dir: Path, python: str | None) -> LaunchResult:
    prepare_job_dir(job_dir)
    job_file = job.write()
    cmd = torchrun_command(job_file, job.world_size, free_port(), python)
    env = dict(os.environ)
    repo = job.repo_root or str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    if job.extensions_dir:
        Path(job.extensions_dir).mkdir(parents=True, exist_ok=True)
        # One cache for all ranks: torch's build lock lets one rank build while the others wait
        # and then load the same .so (instead of every rank compiling its own copy).
        env["TORCH_EXTENSIONS_DIR"] = job.extensions_dir
        env.setdefault("TRITON_CACHE_DIR", os.path.join(job.extensions_dir, "triton"))
        env.setdefault("CUPY_CACHE_DIR", os.path.join(job.extensions_dir, "cupy"))
    env["TORCHELASTIC_ERROR_FILE"] = str(job_dir / "torchelastic_error.json")
    if job.visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = job.visible_devices
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    scratch = job_dir / "scratch"
    scratch.mkdir(exist_ok=True)

    log = open(launcher_log_path(job_dir), "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    log.close()
    deadline = t0 + job.timeout_s
    timed_out = False
    try:
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(POLL_S)
    except BaseException:
        kill_job(proc, job)  # interrupted evaluator: leave no ranks behind
        raise
    if timed_out:
        kill_job(proc, job)
        clear_stale_build_locks(job.extensions_dir, older_than_s=0.0)
    wall = time.monotonic() - t0
    return LaunchResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        wall_s=wall,
        ranks=collect_ranks(job_dir, job.world_size),
        launcher_tail=_tail(launcher_log_path(job_dir)),
        command=cmd,
    )


def collect_ranks(job_dir: Path, world_size: int) -> list[RankReport]:
    reports = []
    for r in range(world_size):
        status = read_json(status_path(job_dir, r)) or {}
        out, err = log_paths(job_dir, r)
        reports.append(
            RankReport(
                rank=r,
                phase=status.get("phase", ""),
                result=read_json(result_path(job_dir, r)),
                stdout_tail=_tail(out),
                stderr_tail=_tail(err),
            )
        )
    return reports


def kill_job(proc: subprocess.Popen, job: JobSpec) -> None:
    """SIGTERM then SIGKILL to torchrun's group and to each rank's own group."""
    groups = {proc.pid} | set(_rank_pids(job, proc.pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + (KILL_GRACE_S if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < end:
            if proc.poll() is not None and not any(_alive(p) for p in groups):
                return
            time.sleep(0.05)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _rank_pids(job: JobSpec, torchrun_pid: int) -> list[int]:
    pids = []
    for r in range(job.world_size):
        status = read_json(status_path(job.job_dir, r)) or {}
        if status.get("pid"):
            pids.append(int(status["pid"]))
    pids.extend(_children(torchrun_pid))  # ranks that had not written a status yet
    return pids


def _children(pid: int) -> list[int]:
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _die_with_parent() -> None:
    """In torchrun's process (before exec): die when the evaluating process dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _tail(path: Path, n: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
