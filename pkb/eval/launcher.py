"""One launch per (problem, candidate): its ranks under pkb.eval.rank_spawner (torchrun's local
agent, in the standard library), with a wall-clock limit for the whole job and per-phase limits
(import, JIT build, one call) that the ranks announce in their status files.

The spawner starts each rank in a session of its own, so killing the spawner's process group does
not reach the ranks: on timeout the launcher signals the spawner's group and every rank's group
(their pids come from /proc: children of the spawner, and status-file pids only when /proc agrees
they descend from it), SIGTERM first, SIGKILL after a grace. After every job, timed out or not,
/proc is scanned for anything the job left behind (a forked child that outlived its call, a
daemon that left the session): a process of the job's groups or sessions, one whose parent chain
leads to the spawner or a rank, or one that carries the job's marker in its environment is killed.

Every file a rank writes is signed with a per-job key (pkb.eval.job.signed) that the ranks read
and delete before the candidate loads; a result or status file without a valid signature was
not written by the harness and does not count.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pkb.eval import judge as judging
from pkb.eval import sandbox as sandboxing
from pkb.eval.interrupt import raise_if_requested
from pkb.eval.timing_gate import TimingGate
from pkb.eval.timing_judge import judge_timing
from pkb.eval.job import (
    HARNESS_FILE_PATTERNS,
    JobSpec,
    cap_log,
    key_path,
    launcher_log_path,
    log_paths,
    read_json,
    read_plain,
    result_path,
    status_path,
    verify,
)
from profiling.hooks import PROFILE_DIR  # where a profiled job's ranks write their traces

TAIL_CHARS = 4000
KILL_GRACE_S = 3.0
POLL_S = 0.1
STATUS_POLL_S = 0.25
# A rank past its phase's deadline with no `expired` mark from its watchdog (the thread never got
# the GIL) is killed this much later.
PHASE_GRACE_S = 3.0
MARKER_ENV = "PKB_EVAL_JOB_MARK"
_PORT_IN_USE = ("address already in use", "EADDRINUSE", "Address in use")


@dataclass
class RankReport:
    rank: int
    phase: str  # the last phase the rank reported ('' when it never started)
    result: dict[str, Any] | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    forged: list[str] = field(default_factory=list)  # files of this rank with no valid signature
    exit: dict[str, Any] | None = None  # from the spawner's log: exit code, signal name

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
    phase_timeout: dict[str, Any] | None = None  # {rank, phase, limit_s} when a phase limit killed it
    strays: list[dict[str, Any]] = field(default_factory=list)  # processes left behind, killed
    sandbox: dict[str, Any] = field(default_factory=dict)  # pkb.eval.sandbox: which one, what its init saw
    unexpected_files: list[str] = field(default_factory=list)  # in the job dir, not the harness's
    judge_check: dict[str, Any] = field(default_factory=dict)  # pkb.eval.judge: the harness's own comparison
    # The kernel's peak RSS of the launch's largest process (wait4 on the launch: every process
    # of the tree is reaped by its parent, so the figure climbs to it), and the memory the launch
    # had as it started (sandbox.memory_headroom): the OOM evidence where no counter exists.
    peak_rss_bytes: int | None = None
    memory_headroom: dict[str, Any] = field(default_factory=dict)
    logs_dropped: dict[str, int] = field(default_factory=dict)  # log file -> bytes cut past job.LOG_CAP_BYTES (at least)

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


def _wrapper_dirs(wrapper: list[str] | None) -> list[str]:
    """The folder of the program each rank runs under (ncu), so the sandbox can see it."""
    exe = shutil.which(wrapper[0]) if wrapper else None
    return [str(Path(exe).resolve().parent)] if exe else []


RANK_SPAWNER = Path(__file__).with_name("rank_spawner.py")


# What every rank imports before its candidate, imported once by the spawner that forks the ranks
# (about 2 s of CPU per rank spared; the suite's CPU launches are mostly this import).
RANK_PRELOAD = ("torch", "torch.distributed")


def rank_command(job_file: Path, world_size: int, port: int, python: str | None = None, wrapper: list[str] | None = None) -> list[str]:
    """The job's ranks under pkb.eval.rank_spawner (torchrun's local agent without its import of
    torch), forked from it with torch imported; with a wrapper (ncu ...) each rank runs
    `wrapper python -m worker` by exec, with nothing imported."""
    py = python or sys.executable
    rank = [*(wrapper or []), py, "-m", "pkb.eval.worker", str(job_file)]
    if wrapper or not RANK_PRELOAD:
        return [py, "-s", str(RANK_SPAWNER), str(world_size), "127.0.0.1", str(port), "--", *rank]
    # no -s here: the forked ranks keep the spawner's sys.path, which must be a rank's own
    return [py, str(RANK_SPAWNER), str(world_size), "127.0.0.1", str(port), "--preload", ",".join(RANK_PRELOAD), "--", *rank]


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


def launch(job: JobSpec, python: str | None = None, retries_on_port_clash: int = 2, gate: TimingGate | None = None) -> LaunchResult:
    """One launch of the job; with `gate` (a screen with job.timing_gate) its ranks found correct
    wait before timing until the scheduler grants it (pkb.eval.timing_gate)."""
    job_dir = Path(job.job_dir)
    for attempt in range(retries_on_port_clash + 1):
        result = _launch_once(job, job_dir, python, gate)
        # rank 0 hosts the store on the port: a clash shows in its log (or the spawner's)
        logs = [result.launcher_tail, *(r.stderr_tail or "" for r in result.ranks)]
        port_clash = result.returncode not in (0, None) and any(s in text for text in logs for s in _PORT_IN_USE)
        if not port_clash or attempt == retries_on_port_clash:
            return result
    return result


def _launch_once(job: JobSpec, job_dir: Path, python: str | None, gate: TimingGate | None = None) -> LaunchResult:
    prepare_job_dir(job_dir)
    if job.profile:
        (job_dir / PROFILE_DIR).mkdir()  # ncu around a rank checks at start that its report can be written there
    job_file = job.write()
    cmd = rank_command(job_file, job.world_size, free_port(), python, job.rank_wrapper)
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
    key = secrets.token_hex(16)
    for r in range(job.world_size):
        kp = key_path(job_dir, r)
        kp.write_text(key, encoding="utf-8")
        os.chmod(kp, 0o600)
    marker = secrets.token_hex(8)
    env[MARKER_ENV] = marker

    # The one place the launch enters its sandbox (pkb.eval.sandbox): own PID namespace, the tree
    # read-only, the work folder and the store hidden, only this job's folders writable.
    box = sandboxing.for_job(
        # the build root is this candidate's own (pkb.eval.build.candidate_build_root): others'
        # builds stay read-only
        writable=[str(job_dir), *(p for p in (job.extensions_dir, job.build_root) if p)],
        readonly=[repo, str(Path(job.candidate_path).parent), *job.extra_sys_path, *env.get("PYTHONPATH", "").split(os.pathsep),
                  *(str(job.problem[k]) for k in ("path", "root") if job.problem.get(k)),  # a problem file, a PKB checkout
                  *_wrapper_dirs(job.rank_wrapper)],  # ncu, wherever it is installed
        hidden=job.sandbox_hide, name=Path(job_dir).name[-40:],
    )
    if box.kind != "none":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback is the only interface inside
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    # The ranks' reference outputs, streamed here before the candidate loads (pkb.eval.judge).
    readers: list[judging.ChannelReader] = []
    judge_check: dict[str, Any] = {}
    try:
        readers = [] if job.reference_only else judging.open_channels(job_dir, job.world_size)
    except OSError as exc:  # the ranks then judge alone, and the record says so
        judge_check = judging.without_channels(f"{type(exc).__name__}: {exc}")
    headroom, headroom_source = sandboxing.memory_headroom()
    tmpdirs_before = rank_tmpdirs_now()
    log = open(launcher_log_path(job_dir), "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        box.wrap(cmd, python or sys.executable, str(scratch)),
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=box.pass_fds,
        preexec_fn=partial(box.preexec, tuple(job.cpus)) if sys.platform.startswith("linux") else None,
    )
    box.started()
    log.close()
    deadline = t0 + job.timeout_s
    timed_out = False
    phase_timeout = None
    next_status = 0.0
    known: set[int] = set()  # every pid seen in the job, for the sweep afterwards
    peak_rss: list[int] = []
    logs_dropped: dict[str, int] = {}
    last = t0
    try:
        while _reap(proc, peak_rss) is None:
            now = time.monotonic()
            statuses = _rank_statuses(job, key) if now >= next_status else None
            if gate is not None:
                phases = [s.get("phase") if s else None for s in statuses] if statuses is not None and not gate.waiting.is_set() else []
                if gate.step(job_dir, job.world_size, phases):  # parked: the launch's clock stands still
                    deadline += now - last
                    gate.waited_s += now - last
            last = now
            if now >= deadline:
                timed_out = True
                break
            raise_if_requested()  # Ctrl-C: the job is killed below, as for any interruption
            if statuses is not None:
                next_status = now + STATUS_POLL_S
                known |= set(_descendants({proc.pid}))
                _cap_logs(job_dir, job.world_size, logs_dropped)
                phase_timeout = _phase_expired(statuses)
                if phase_timeout:
                    timed_out = True
                    break
            time.sleep(POLL_S)
    except BaseException:
        kill_job(proc, job, known, root=box.root_pid(proc))  # interrupted evaluator: leave no ranks behind
        box.finish(proc)
        sweep_strays(marker, {proc.pid} | known)
        judging.finish_channels(readers, wait_s=0.5)
        for reader in readers:
            reader.close()
        raise
    if timed_out:
        known |= set(_descendants({proc.pid}))
        kill_job(proc, job, known, root=box.root_pid(proc))
        clear_stale_build_locks(job.extensions_dir, older_than_s=0.0)
    wall = time.monotonic() - t0
    boxed = box.finish(proc, known)
    strays = boxed.pop("strays", []) + sweep_strays(marker, {proc.pid} | known)
    for r in range(job.world_size):  # a rank that never started leaves its key behind
        try:
            key_path(job_dir, r).unlink()
        except OSError:
            pass
    remove_rank_tmpdirs(job_dir, tmpdirs_before)
    _cap_logs(job_dir, job.world_size, logs_dropped)
    tail = _tail(launcher_log_path(job_dir), 16000)
    ranks = collect_ranks(job_dir, job.world_size, key)
    exits = torchrun_exits(tail)
    for r in ranks:
        r.exit = exits.get(r.rank)
    if readers:
        judging.finish_channels(readers)
        try:
            judge_check = judging.recheck(readers, job_dir, [r.result for r in ranks])
        finally:
            for reader in readers:
                reader.close()
    timing_check = judge_rank_timing(readers, ranks, job.iters, gate)
    if timing_check:
        judge_check = {**judge_check, "timing": timing_check}
    return LaunchResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        wall_s=wall,
        ranks=ranks,
        launcher_tail=tail[-TAIL_CHARS:],
        command=cmd,
        phase_timeout=phase_timeout,
        strays=strays,
        sandbox=boxed,
        unexpected_files=unexpected_files(job_dir, allowed=(PROFILE_DIR,) if job.profile else ()),
        judge_check=judge_check,
        peak_rss_bytes=peak_rss[0] if peak_rss else None,
        memory_headroom={"bytes": headroom, "source": headroom_source},
        logs_dropped=logs_dropped,
    )


def judge_rank_timing(readers: list[judging.ChannelReader], ranks: list[RankReport], iters: int,
                      gate: TimingGate | None = None) -> dict[str, Any]:
    """Each rank's timing figures, computed here from its raw measurements (pkb.eval.timing_judge):
    from its channel, else (no channel) from its result file, never the figures a rank reports.
    Returns the check for the record ({} when no rank timed anything)."""
    by_rank = {reader.rank: reader for reader in readers}
    out: dict[str, Any] = {}
    for r in ranks:
        res = r.result
        reader = by_rank.get(r.rank)
        if reader is not None and reader.late:  # kept for a rank that died or hung too: evidence of tampering
            out.setdefault("late_messages", {})[str(r.rank)] = reader.late[:8]
            if judging.LATE_REFERENCE_ALONE in reader.late:
                out.setdefault("problems", []).append(f"rank {r.rank}: {judging.LATE_REFERENCE_ALONE}")
        if res is None:
            continue
        res.pop("timing", None)  # a rank measures; it does not report figures
        raw = res.pop("timing_raw", None) or {}
        # the reference's own timing (before the load) comes through the channel whatever the
        # candidate does later: only the interleaved rounds say whether the timing used it
        beside = [m for m in reader.timing_rounds if m.get("side") != judging.REFERENCE_ALONE] if reader is not None else []
        if reader is not None and (beside or not raw):
            rounds, marks, source = reader.timing_rounds, reader.timing_marks, "channel"
        elif reader is not None and reader.meta is not None:
            # the rank's channel was open before the candidate loaded, yet its timings came only
            # in the result file, which the candidate's process writes: not taken
            check = {"source": "the rank's result file, its channel open", "problems": [
                "its channel was open before the candidate loaded, but its timings came only in its result file"]}
            out.setdefault("ranks", {})[str(r.rank)] = check
            out.setdefault("problems", []).extend(f"rank {r.rank}: {p}" for p in check["problems"])
            continue
        else:  # the rank could not open its channel: its result file, without the harness's clock
            rounds, marks, source = list(raw.get("rounds") or []), [], "the rank's result file (no channel)"
            rounds = [{k: v for k, v in m.items() if k != "arrived_ns"} for m in rounds if isinstance(m, dict)]
        if not any(m.get("side") != judging.REFERENCE_ALONE for m in rounds):
            continue  # nothing timed beside the candidate (a screen that failed, say): nothing to judge
        try:
            stats, check = judge_timing(rounds, marks, iters, source, reader.timing_samples if source == "channel" else None)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # the candidate's process wrote them
            stats, check = None, {"source": source, "problems": [f"measurements that cannot be read ({type(exc).__name__}: {str(exc)[:200]})"]}
        if stats is not None:
            res["timing"] = stats
        out.setdefault("ranks", {})[str(r.rank)] = check
        out.setdefault("problems", []).extend(f"rank {r.rank}: {p}" for p in check["problems"])
    if gate is not None:
        # the reference's own timing came before the candidate loaded, by design before the gate
        out.setdefault("problems", []).extend(gate.check({rd.rank: [m for m in (*rd.timing_rounds, *rd.timing_marks)
                                                                    if m.get("side") != judging.REFERENCE_ALONE] for rd in readers}))
        if not out["problems"]:
            del out["problems"]
    return out


def _reap(proc: subprocess.Popen, peak_rss: list[int]) -> int | None:
    """Popen.poll() through wait4, which also gives the reaped tree's largest peak RSS (the
    kernel's ru_maxrss, KiB on Linux), appended to `peak_rss`."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere
        return proc.poll()
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak_rss.append(int(usage.ru_maxrss) * 1024)
    return proc.returncode


def _rank_statuses(job: JobSpec, key: str | None) -> list[dict[str, Any] | None]:
    """Each rank's status file, None where unreadable or not signed with the job's key."""
    statuses = [read_json(status_path(job.job_dir, r)) for r in range(job.world_size)]
    return [s if s and verify(s, key) else None for s in statuses]


def _phase_expired(statuses: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """A rank whose watchdog marked it past a limit, or past its phase deadline plus a grace."""
    now = time.time()
    for r, status in enumerate(statuses):
        if status is None:
            continue
        if status.get("expired"):
            return {"rank": r, "phase": status.get("expired_in") or status.get("phase", ""), "limit_s": status.get("limit_s"),
                    "since": status.get("since", now)}
        dl = status.get("deadline")
        if isinstance(dl, (int, float)) and now > dl + PHASE_GRACE_S:
            return {"rank": r, "phase": status.get("phase", ""), "limit_s": status.get("limit_s"), "no_watchdog": True,
                    "since": now}
    return None


def collect_ranks(job_dir: Path, world_size: int, key: str | None = None) -> list[RankReport]:
    reports = []
    for r in range(world_size):
        forged = []
        status = read_json(status_path(job_dir, r))
        if status is not None and not verify(status, key):
            forged.append(status_path(job_dir, r).name)
            status = None
        result = read_json(result_path(job_dir, r))
        if result is not None and not (verify(result, key) and result.get("rank", r) == r):
            forged.append(result_path(job_dir, r).name)
            result = None
        status = status or {}
        out, err = log_paths(job_dir, r)
        reports.append(
            RankReport(
                rank=r,
                phase=status.get("phase", ""),
                result=result,
                stdout_tail=_tail(out),
                stderr_tail=_tail(err),
                forged=forged,
            )
        )
    return reports


def rank_tmpdirs_now() -> set[str]:
    """The names under /tmp that look like a rank's short TMPDIR (pkb.eval.rank_process.short_tmpdir)."""
    try:
        return {n for n in os.listdir("/tmp") if n.startswith("pkb-r")}
    except OSError:
        return set()


def remove_rank_tmpdirs(job_dir: Path, before: set[str]) -> None:
    """The short TMPDIRs the ranks made under /tmp (a killed rank cannot remove its own).

    The rank names its folder in its scratch, where the candidate can rewrite it: only a folder
    of the rank's pattern that appeared during the launch (not in `before`, taken just ahead of it)
    is removed, so a candidate cannot point the harness at a folder of the host's."""
    import shutil

    for marker in Path(job_dir, "scratch").glob("rank*/tmpdir.txt"):
        try:
            tmp = Path(read_plain(marker, cap=4096).decode("utf-8", "replace").strip())
        except OSError:
            continue
        rank = marker.parent.name[len("rank"):]
        if (tmp.parent == Path("/tmp") and tmp.name.startswith(f"pkb-r{rank}-") and tmp.name not in before
                and tmp.is_dir() and not tmp.is_symlink()):
            shutil.rmtree(tmp, ignore_errors=True)


def unexpected_files(job_dir: Path, allowed: tuple[str, ...] = ()) -> list[str]:
    """Names in the job directory that neither the harness's patterns nor `allowed` explain."""
    from fnmatch import fnmatch

    try:
        names = sorted(p.name for p in Path(job_dir).iterdir())
    except OSError:
        return []
    patterns = HARNESS_FILE_PATTERNS + tuple(allowed)
    return [n for n in names if not any(fnmatch(n, pat) for pat in patterns)]


_FAILURE_ROW = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")


def torchrun_exits(log: str) -> dict[int, dict[str, Any]]:
    """Per-rank exit codes from the spawner's failure table, torchrun's format (a negative code is
    the signal)."""
    out: dict[int, dict[str, Any]] = {}
    for m in _FAILURE_ROW.finditer(log):
        rank, code, pid = int(m.group(1)), int(m.group(2)), int(m.group(3))
        entry: dict[str, Any] = {"exit_code": code, "pid": pid}
        if code < 0:
            try:
                entry["signal"] = signal.Signals(-code).name
            except ValueError:
                entry["signal"] = f"signal {-code}"
        out.setdefault(rank, entry)
    return out


def kill_job(proc: subprocess.Popen, job: JobSpec, known: set[int] | None = None, root: int | None = None) -> None:
    """SIGTERM then SIGKILL to the spawner's group and to each rank's own group (`root`: the
    spawner's pid when `proc` is its sandbox)."""
    root = root or proc.pid
    groups = {root} | set(_rank_pids(job, root, known or set()))
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


def _rank_pids(job: JobSpec, spawner_pid: int, known: set[int]) -> list[int]:
    """The ranks' pids. A status file is the candidate's to forge, so its pid counts only when
    /proc (or the polling loop) saw that process descend from the spawner."""
    family = set(_descendants({spawner_pid})) | known
    pids = [p for p in _children(spawner_pid)]  # ranks that had not written a status yet
    for r in range(job.world_size):
        status = read_json(status_path(job.job_dir, r)) or {}
        pid = status.get("pid")
        if isinstance(pid, int) and pid in family and pid != os.getpid():
            pids.append(pid)
    return [p for p in pids if p > 1 and p != os.getpid() and p != os.getpgid(0)]


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, pgid, sid) of every live process (zombies left out)."""
    table: dict[int, tuple[int, int, int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return table
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in ("Z", "X"):
            continue
        try:
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (ValueError, IndexError):
            continue
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, int, int]] | None = None) -> list[int]:
    table = _proc_table() if table is None else table
    out, frontier = [], set(roots)
    seen = set(roots)
    while frontier:
        nxt = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier and pid not in seen}
        out.extend(nxt)
        seen |= nxt
        frontier = nxt
    return out


def _has_marker(pid: int, marker: str) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER_ENV}={marker}".encode() in env.split(b"\0")


def sweep_strays(marker: str, family: set[int]) -> list[dict[str, Any]]:
    """Kill every process the job left behind; return what was found.

    A process belongs to the job when its parent chain leads to the spawner or a rank, when it is in
    one of their process groups or sessions, or when its environment carries the job's marker (a
    double fork that left the session still inherits the environment)."""
    me = os.getpid()
    killed: list[dict[str, Any]] = []
    for _ in range(3):  # a stray may fork while we look
        table = _proc_table()
        roots = {p for p in family if p in table}
        groups = {table[p][1] for p in roots} | set(family)
        sessions = {table[p][2] for p in roots} | set(family)
        mine = {me, os.getppid(), os.getpgid(0), os.getsid(0)}
        found = set(_descendants(roots, table)) | roots
        found |= {pid for pid, (_, pgid, sid) in table.items() if pgid in groups or sid in sessions}
        found |= {pid for pid in table if _has_marker(pid, marker)}
        found -= mine
        found = {p for p in found if p > 1 and not _is_ancestor_of_me(p, table)}
        if not found:
            break
        for pid in sorted(found):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            except OSError:
                cmdline = ""
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.append({"pid": pid, "cmdline": cmdline[:200]})
        family |= found
        time.sleep(0.05)
    return killed


def _is_ancestor_of_me(pid: int, table: dict[int, tuple[int, int, int]]) -> bool:
    cur = os.getpid()
    for _ in range(64):
        if cur == pid:
            return True
        if cur not in table:
            return False
        cur = table[cur][0]
        if cur <= 1:
            return False
    return False


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


def _cap_logs(job_dir: str | Path, world_size: int, dropped: dict[str, int]) -> None:
    for path in [launcher_log_path(job_dir), *(p for r in range(world_size) for p in log_paths(job_dir, r))]:
        cut = cap_log(path)
        if cut:
            dropped[path.name] = dropped.get(path.name, 0) + cut


def _tail(path: Path, n: int = TAIL_CHARS) -> str:
    try:
        return read_plain(path, tail=n).decode("utf-8", "replace")
    except OSError:
        return ""
