"""A sandbox around one candidate launch, built on bubblewrap (Debian's `bubblewrap` package).

Inside it the launch (the rank spawner and its ranks) has:
    its own PID namespace     the harness, other jobs and every other process are invisible and
                              out of signal reach; its init is pkb/eval/sandbox_init.py, which the
                              candidate cannot signal or trace, and which names and kills whatever
                              the launch left behind when the spawner exits
    a read-only filesystem    the whole tree read-only; the evaluation's work folder (other
                              candidates' jobs and builds) and the store hidden under empty tmpfs;
                              writable only its job folder (scratch, result files), its own build
                              cache and a private /tmp; no capabilities (it cannot remount)
    loopback only             its own network namespace (the ranks rendezvous on 127.0.0.1)
    the GPU device nodes      /dev/nvidia* passed through, a fresh minimal /dev otherwise
    no inherited descriptors  but stdin/stdout/stderr and the init's report pipe
and a memory cgroup of its own where the machine lets us make one: its OOM-kill counter is the
evidence that a SIGKILL came from the OOM killer, and every process in it is killed at the end.

Where bubblewrap is missing or refused, `unshare` (util-linux) gives the PID namespace, and as root
its init walls the launch in much as bubblewrap would (the network stays shared); where those walls
keep a child from initialising CUDA that a plain child initialises, they are left off and the record
says why (`walls_off`). Where unshare fails too, the plain process runs as before. The record says
which (details.sandbox), and PKB_SANDBOX=bwrap|unshare|none forces one. Under either fallback the
store, the work folder and the other candidates' jobs stay reachable by path (same user, same
filesystem): the record says so (`fallback`). Under `none` the harness also makes itself non-dumpable before the launch, which
closes its /proc/<pid>/fd (the open store, the judge's unnamed reference copies), its memory and
its environment to the candidate's processes, unless they run as root (`harness_proc`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

INIT_SCRIPT = str(Path(__file__).with_name("sandbox_init.py"))
# What each kind keeps from the candidate (said in every record).
ISOLATES = {
    "bwrap": "own PID and network namespaces; tree read-only, store and other jobs hidden; no capabilities",
    "unshare": "own PID namespace only; the filesystem, network and capabilities are shared",
    "none": "no namespaces: the launcher's process groups, its sweep and the launch cgroup where one is made",
}
END_WAIT_S = 10.0  # for the init to name and kill what is left, after the spawner exited
# What a candidate can still reach under each fallback (said in every record of that kind).
REACHABLE = {
    "unshare": "harness files reachable: the store, the work folder and other candidates' jobs, by path "
               "(shared filesystem, same user); the harness's /proc/<pid>/fd too once a root candidate "
               "unmounts its own /proc (unshare runs only as root here: no user namespace)",
    "none": "harness files reachable: the store, the work folder and other candidates' jobs, by path "
            "(same user, same filesystem), and every process of the user by pid",
}


# Under unshare the init walls the launch in itself (as root: mounts, then no capabilities).
ENCLOSED_UNSHARE = (
    "own PID namespace; tree read-only, store and work folder hidden, private /tmp, minimal /dev; no capabilities",
    "the network is shared (no loopback-only namespace); everything else as under bwrap",
)


def _encloses() -> bool:
    """PKB_SANDBOX_ENCLOSE=0 leaves the unshare fallback a PID namespace alone."""
    return os.environ.get("PKB_SANDBOX_ENCLOSE", "1").strip() != "0"


# Run by the launch's interpreter, in a child: exit 0 where the CUDA driver initialises, 3 where
# there is no driver library, 4 where cuInit fails.
CUDA_PROBE = (
    "import ctypes, sys\n"
    "try:\n    lib = ctypes.CDLL('libcuda.so.1')\nexcept OSError:\n    sys.exit(3)\n"
    "sys.exit(0 if lib.cuInit(0) == 0 else 4)\n"
)
PROBE_TIMEOUT_S = 120


@lru_cache(maxsize=None)
def walls_break_cuda(python: str, readonly: tuple[str, ...]) -> str:
    """Why the unshare walls must be left off on this machine ('' where they may stay): a cuInit
    that succeeds in a plain child and fails inside the walls. A launch then gets the PID namespace
    alone, with this reason in its record, rather than every candidate failing at init with a
    GPU it cannot see. Probed once per interpreter; where no child sees a GPU the walls cost nothing."""
    cmd = [python, "-I", "-S", "-c", CUDA_PROBE]
    try:
        if subprocess.run(cmd, capture_output=True, timeout=PROBE_TIMEOUT_S).returncode != 0:
            return ""
    except (OSError, subprocess.TimeoutExpired):
        return ""
    r, w = os.pipe()
    spec = json.dumps({"readonly": list(readonly)})
    try:
        res = subprocess.run(["unshare", *_UNSHARE_FLAGS, python, "-I", "-S", INIT_SCRIPT, str(w), "--enclose", spec, "--", *cmd],
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, pass_fds=(w,))
        code = str(res.returncode)
    except (OSError, subprocess.TimeoutExpired) as exc:
        code = type(exc).__name__
    finally:
        os.close(w)
    report = _init_report(_read_all(r))
    if report.get("exit") == 0:
        return ""
    why = report.get("enclose_error") or (f"cuInit failed inside (probe exit {report['exit']})" if "exit" in report else f"probe exit {code}")
    return f"the unshare walls left off: a plain child initialises CUDA, one inside the walls does not ({why})"


def choose() -> tuple[str, str]:
    """(kind, why not a stronger one): the strongest sandbox that starts on this machine, or the
    one PKB_SANDBOX forces (read at each launch; the probe is made once per value)."""
    return _choose(os.environ.get("PKB_SANDBOX", "").strip().lower())


@lru_cache(maxsize=None)
def _choose(forced: str) -> tuple[str, str]:
    if forced == "none":
        return "none", "PKB_SANDBOX=none"
    reasons = []
    if forced in ("", "bwrap"):
        why = _try([*_bwrap_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"], "bwrap")
        if not why:
            return "bwrap", ""
        reasons.append(why)
    if forced in ("", "bwrap", "unshare"):
        why = _try(["unshare", *_UNSHARE_FLAGS, "true"], "unshare")
        if not why:
            return "unshare", "; ".join(reasons) or "PKB_SANDBOX=unshare"
        reasons.append(why)
    return "none", "; ".join(reasons) or f"PKB_SANDBOX={forced}: unknown kind"


def _try(cmd: list[str], name: str) -> str:
    if not shutil.which(cmd[0]):
        return f"{name} not installed" + (" (apt-get install bubblewrap)" if name == "bwrap" else "")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{name} failed to start: {exc}"
    if res.returncode != 0:
        return f"{name} refused here: {(res.stderr or res.stdout).strip()[-300:]}"
    return ""


def _bwrap_flags() -> list[str]:
    return ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net", "--new-session", "--as-pid-1", "--cap-drop", "ALL"]


_UNSHARE_FLAGS = ["--pid", "--fork", "--mount-proc", "--kill-child"]


@dataclass
class Sandbox:
    """One launch's sandbox: wrap() its command, start it with pass_fds/preexec, finish() after."""

    kind: str
    reason: str = ""
    writable: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    cgroup: LaunchCgroup | None = None
    _report: tuple[int, int] | None = None
    _oom_before: int | None = None
    _kernel_oom_before: int | None = None
    harness_proc: str = ""
    walls_off: str = ""  # why the unshare walls were left off for this launch

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._report[1],) if self._report else ()

    def wrap(self, cmd: list[str], python: str, cwd: str) -> list[str]:
        """The command that runs `cmd` inside this sandbox (unchanged for kind none, where the
        harness closes its own /proc entries first)."""
        if self.kind == "none":
            self.harness_proc = close_harness_proc()
            return cmd
        self._report = os.pipe()
        os.set_inheritable(self._report[1], True)
        init = [python, "-I", "-S", INIT_SCRIPT, str(self._report[1]), "--", *cmd]
        if self.kind == "unshare":
            spec = self._enclose_spec(python)
            walled = _encloses()
            if walled:
                self.walls_off = walls_break_cuda(python, tuple(spec["readonly"]))
            enclose = ["--enclose", json.dumps(spec)] if walled and not self.walls_off else []
            return ["unshare", *_UNSHARE_FLAGS, *init[:5], *enclose, *init[5:]]
        return [*_bwrap_flags(), *self._bwrap_mounts(python), "--chdir", cwd, "--", *init]

    def _bwrap_mounts(self, python: str) -> list[str]:
        """Order matters (later mounts cover earlier ones): the tree read-only, a private /tmp,
        what the ranks need from under /tmp, then the hidden paths, then what the ranks need
        from under those, then the job's writable folders."""
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for node in sorted(Path("/dev").glob("nvidia*")):
            args += ["--dev-bind", str(node), str(node)]
        needed = sorted({str(Path(p).resolve()) for p in (*self.readonly, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(python))) if p})
        hidden_dirs = [p for p in self.hidden if Path(p).is_dir()]
        under_hidden = [p for p in needed if any(_under(p, h) for h in hidden_dirs)]
        for p in needed:
            if _under(p, "/tmp") and p not in under_hidden and os.path.exists(p):
                args += ["--ro-bind", p, p]
        for path in self.hidden:
            p = Path(path)
            if p.is_dir():
                args += ["--tmpfs", str(p)]
            else:
                for f in (p, *(Path(f"{p}{s}") for s in ("-wal", "-shm", ".lock"))):
                    if f.exists():
                        args += ["--ro-bind", "/dev/null", str(f)]
        for p in under_hidden:
            if os.path.exists(p):
                args += ["--ro-bind", p, p]
        for p in self.writable:
            os.makedirs(p, exist_ok=True)
            args += ["--bind", p, p]
        return args

    def _enclose_spec(self, python: str) -> dict[str, list[str]]:
        """For the init's own mounts under unshare (pkb/eval/sandbox_init.py): what to hide, what
        stays writable, and what the ranks read from under /tmp or a hidden folder."""
        needed = {str(Path(p).resolve()) for p in (*self.readonly, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(python))) if p}
        covered = ["/tmp", "/dev", *self.hidden]
        return {"hidden": self.hidden, "writable": self.writable,
                "readonly": sorted(p for p in needed if any(_under(p, c) for c in covered) and os.path.exists(p))}

    def preexec(self, cpus: tuple[int, ...] = ()) -> None:
        """In the launched process, before exec: join the launch's cgroup; die with the harness;
        then keep to `cpus` where given (every process and thread it starts inherits them)."""
        if self.cgroup is not None:
            self.cgroup.join_self()
        _die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    def started(self) -> None:
        if self.cgroup is not None:
            self._oom_before = self.cgroup.oom_kills()
        else:
            self._kernel_oom_before = kernel_oom_kill_count()
        if self._report:
            os.close(self._report[1])

    def root_pid(self, proc: subprocess.Popen) -> int:
        """The rank spawner's pid as this process sees it (the first child of the sandbox's init)."""
        if self.kind == "none":
            return proc.pid
        init = _children(proc.pid)
        kids = _children(init[0]) if init else []
        return min(kids, key=_ns_pid) if kids else proc.pid

    def finish(self, proc: subprocess.Popen, known: set[int] | None = None) -> dict[str, Any]:
        """After the spawner ended (or was killed): let the init name and kill the leftovers, end the
        sandbox, kill anything still in the cgroup, and say what happened."""
        out: dict[str, Any] = {"kind": self.kind, "isolates": ISOLATES[self.kind]}
        if self.reason:
            out["fallback_reason" if self.kind != "bwrap" else "note"] = self.reason
        if self.kind in REACHABLE:
            out["fallback"] = REACHABLE[self.kind]
        if self.harness_proc:
            out["harness_proc"] = self.harness_proc
        if self.walls_off:
            out["walls_off"] = self.walls_off
        if self.kind != "none":
            try:
                proc.wait(timeout=END_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()  # the init dies with it (die-with-parent / kill-child): so does the namespace
                proc.wait()
                out["init_unresponsive"] = True
            merged = _init_report(_read_all(self._report[0]) if self._report else "")
            out["init_exit"] = merged.get("exit")
            if merged.get("enclosed"):
                out["isolates"], out["fallback"] = ENCLOSED_UNSHARE
            elif merged.get("enclose_error"):
                out["enclose_error"] = merged["enclose_error"]
            out["strays"] = [{**s, "where": "sandbox"} for s in merged.get("strays") or []]
            out["stray_count"] = int(merged.get("stray_count") or len(out["strays"]))  # all killed; some named
            # The init reports the spawner's end before it exits: without that line it was killed
            # from outside the sandbox (nothing inside can signal it).
            out["init_killed"] = "exit" not in merged and not out.get("init_unresponsive")
            out["init_returncode"] = proc.returncode
        if self.cgroup is not None:
            left = self.cgroup.kill_all()
            if left:
                out.setdefault("strays", []).extend({"pid": p, "cmdline": c, "where": "cgroup"} for p, c in left)
            after = self.cgroup.oom_kills()
            if after is not None and self._oom_before is not None:
                out["oom_kills"] = after - self._oom_before
                out["cgroup"] = self.cgroup.path
            self.cgroup.remove()
        if out.get("oom_kills") is None:
            after = kernel_oom_kill_count()
            if after is not None and self._kernel_oom_before is not None:
                out["kernel_oom_kills"] = after - self._kernel_oom_before  # machine-wide, during the launch
            lines = oom_killed_in_kernel_log(set(known)) if known else []
            if lines:
                out["kernel_oom"] = lines
        return out


def for_job(writable: list[str], readonly: list[str], hidden: list[str], name: str) -> Sandbox:
    kind, reason = choose()
    for p in writable:  # a folder made writable must exist before the walls go up (unshare's
        os.makedirs(p, exist_ok=True)  # init binds only what is there; inside, the tree is read-only)
    return Sandbox(kind, reason, [str(Path(p).resolve()) for p in writable], [str(Path(p).resolve()) for p in readonly],
                   [str(Path(p).resolve()) for p in hidden], LaunchCgroup.create(name))


def processes_of_job(job_dir: str | Path) -> list[int]:
    """Pids (as this process sees them) of the job's rank spawner and ranks: their command lines name
    the job's file. Inside a sandbox the ranks' own pids are their namespace's, so this is how a
    process outside looks for them."""
    needle = str(Path(job_dir) / "job.json").encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if needle in cmd and state not in (b"Z", b"X"):
                out.append(int(entry.name))
    return out


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _init_report(text: str) -> dict[str, Any]:
    """The init's report lines (one JSON object each) merged into one."""
    return {k: v for line in text.splitlines() if line.startswith("{") for k, v in json.loads(line).items()}


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _ns_pid(pid: int) -> int:
    """The pid in the innermost namespace (the last field of NSpid)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return 1 << 30


PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def close_harness_proc() -> str:
    """Makes this process non-dumpable (prctl PR_SET_DUMPABLE 0; its children get the flag back at
    exec): the kernel then refuses its /proc/<pid>/fd, mem and environ to other processes of the
    same user that lack CAP_SYS_PTRACE, while this process still reads its own /proc/self. Without
    a sandbox that is what keeps a candidate from opening the store or the judge's reference copies
    through this process's descriptors. Returns the record's words for what it achieved."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
            return "open: the harness could not make itself non-dumpable"
    except (OSError, AttributeError):
        return "open: no prctl here"
    if os.geteuid() == 0:
        return "open to a root candidate: the harness is non-dumpable, but root reads any process's /proc/<pid>/fd"
    return "closed: the harness is non-dumpable (its /proc/<pid>/fd, mem and environ refused to the candidate's user)"


def _die_with_parent() -> None:
    # pkb.eval.rank_process has the ranks' version; this module imports nothing of the project
    # (it also runs as a lone copy: tests/test_eval_sandbox.py)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


class LaunchCgroup:
    """A memory cgroup for one launch, under the one this process is in (v1 or v2): every process
    of the launch stays in it (the sandbox's /sys is read-only), and its OOM-kill counter counts
    the kills of the OOM killer among them, global or not."""

    def __init__(self, path: str, version: int) -> None:
        self.path, self.version = path, version

    @classmethod
    def create(cls, name: str) -> LaunchCgroup | None:
        if os.environ.get("PKB_SANDBOX_CGROUP", "1") == "0":
            return None
        base = _own_memory_cgroup()
        if base is None:
            return None
        path, version = base
        _remove_orphaned(path)
        target = os.path.join(path, f"pkb-{name}-{os.getpid()}-{time.monotonic_ns() % 10**9}")
        try:
            os.mkdir(target)
        except OSError:
            return None
        cg = cls(target, version)
        if cg.oom_kills() is None:
            cg.remove()
            return None
        limit = os.environ.get("PKB_SANDBOX_MEMORY_MAX", "")  # bytes for the whole launch (tests)
        if limit:
            try:
                Path(target, "memory.limit_in_bytes" if version == 1 else "memory.max").write_text(limit)
            except OSError:
                cg.remove()
                return None
        return cg

    def join_self(self) -> None:
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def oom_kills(self) -> int | None:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            return oom_kill_count(Path(self.path, name).read_text())
        except OSError:
            return None

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in Path(self.path, "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> list[tuple[int, str]]:
        killed: dict[int, str] = {}
        for _ in range(50):
            pids = [p for p in self.pids() if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
                    os.kill(pid, signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    continue
                killed.setdefault(pid, cmd[:200])
            time.sleep(0.02)
        return list(killed.items())

    def remove(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)  # the last killed process is still leaving


def _remove_orphaned(parent: str) -> None:
    """Empty launch cgroups of evaluators that died (kill -9) before removing them."""
    for entry in Path(parent).glob("pkb-*"):
        m = re.search(r"-(\d+)-\d+$", entry.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            try:
                os.rmdir(entry)  # refused while a process is still in it
            except OSError:
                pass


def _own_memory_cgroup() -> tuple[str, int] | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            path = f"/sys/fs/cgroup/memory{rel}"
            if os.path.isdir(path):
                return path, 1
    for line in lines:
        if line.startswith("0::"):
            root = "/sys/fs/cgroup"
            try:
                if "memory" not in Path(root, "cgroup.controllers").read_text().split():
                    return None
            except OSError:
                return None
            return root + line[3:].rstrip("/"), 2
    return None


def oom_kill_count(text: str) -> int | None:
    """The `oom_kill` line of a cgroup's memory.events (v2) or memory.oom_control (v1), or of
    /proc/vmstat: processes killed by the OOM killer."""
    m = re.search(r"^oom_kill (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def kernel_oom_kill_count() -> int | None:
    """The kernel's count of OOM kills on this machine (/proc/vmstat, Linux 4.13+, readable
    without root): a rise during a launch without a cgroup of its own is the OOM killer's mark."""
    try:
        return oom_kill_count(Path("/proc/vmstat").read_text())
    except OSError:
        return None


_NO_LIMIT = 1 << 60  # a cgroup "limit" this large (v1's 9223372036854771712) is none


def memory_headroom() -> tuple[int | None, str]:
    """(bytes, where the figure comes from): the memory a launch can take as it starts, the least
    of the machine's MemAvailable and each memory cgroup limit above this process less that
    cgroup's usage. (None, why) when nothing can be read."""
    figures: list[tuple[int, str]] = []
    try:
        m = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        if m:
            figures.append((int(m.group(1)) * 1024, "MemAvailable"))
    except OSError:
        pass
    own = _own_memory_cgroup()
    if own is not None:
        path, version = own
        limit_name, usage_name = ("memory.limit_in_bytes", "memory.usage_in_bytes") if version == 1 else ("memory.max", "memory.current")
        top = "/sys/fs/cgroup/memory" if version == 1 else "/sys/fs/cgroup"
        cur = Path(path)
        while _under(str(cur), top):
            try:
                raw = (cur / limit_name).read_text().strip()
                used = int((cur / usage_name).read_text().strip())
            except (OSError, ValueError):
                raw, used = "max", 0
            if raw.isdigit() and int(raw) < _NO_LIMIT:
                figures.append((max(0, int(raw) - used), f"the memory cgroup {cur}'s limit less its usage"))
            if str(cur) == top:
                break
            cur = cur.parent
    if not figures:
        return None, "neither /proc/meminfo nor a memory cgroup limit is readable"
    return min(figures)


_DMESG_KILLED = re.compile(r"(?:Out of memory|Memory cgroup out of memory)[^\n]*?Killed process (\d+)")


def oom_killed_in_kernel_log(pids: set[int]) -> list[str]:
    """The kernel log's OOM-kill lines of these pids, where the log is readable here."""
    try:
        res = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if res.returncode != 0:
        return []
    return [line.strip()[:300] for line in res.stdout.splitlines() if (m := _DMESG_KILLED.search(line)) and int(m.group(1)) in pids]
