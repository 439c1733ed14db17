"""Our own JIT extension builds: one directory per content hash and flags, a lock that knows a
dead owner, and prebuilds in a pool before any candidate's clock starts.

    build_root(out)                  where builds live (not torch's ~/.cache/torch_extensions)
    route_builds(root)               inside a process, before the candidate is imported
    prebuild(path, options, t)       one candidate's builds, in a subprocess of its own
    prebuild_many(paths, options, j) a pool sized to cores and memory, one build per content hash

Why our own: torch keys its cache by extension name, so two candidates that both call their
extension `ext` rebuild over each other; and its build lock (torch/utils/file_baton.py) is a
plain file that a killed build leaves behind, after which every later build of that name waits
forever. Here the directory is `<root>/<name>-<hash of name, sources, flags, torch/CUDA/arch>`,
and the lock is an flock on `<dir>/pkb.lock`: the kernel drops it when its holder dies, so a
killed build never makes a later one wait. The holder writes who it is (pid, host, start) into
the lock file for waiters to report. A torch baton found in the directory while we hold our lock
is stale by construction (every builder of the directory takes our lock first) and is removed.

A build that fails to compile leaves `pkb-failed.json` with torch's message; a later build of the
same key re-raises it at once (the same RuntimeError text) instead of running nvcc again, so a
candidate whose prebuild failed gets its compile_error in seconds at launch.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from pkb.eval.interrupt import raise_if_requested

LOCK_FILE = "pkb.lock"
FAILED_FILE = "pkb-failed.json"
TORCH_BATON = "lock"  # torch.utils.cpp_extension's FileBaton name inside build_directory
INTERRUPT_POLL_S = 0.25  # how soon a prebuild notices Ctrl-C
NVCC_MEMORY_BYTES = 3 * 1024**3  # one nvcc over torch's headers, measured at about 3 GB
# Arguments that change where or how verbosely a build runs, not what it produces.
_NOT_KEYED = {"build_directory", "verbose", "keep_intermediates"}
# Every build this process routed, in order (prebuild reports it; the worker may read it).
BUILD_LOG: list[dict[str, Any]] = []
_ROUTED_ROOT: list[Path] = []


def build_root(out: Path | None = None) -> Path:
    """`out/builds` when given; else $PKB_BUILD_DIR, $PKB_CACHE_DIR/builds, or the user cache."""
    if out is not None:
        return Path(out) / "builds"
    if os.environ.get("PKB_BUILD_DIR"):
        return Path(os.environ["PKB_BUILD_DIR"])
    if os.environ.get("PKB_CACHE_DIR"):
        return Path(os.environ["PKB_CACHE_DIR"]) / "builds"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pkb-analyze" / "builds"


def candidate_build_root(root: Path, content_sha256: str) -> Path:
    """One candidate's builds (and its prebuild's logs and scratch): `<root>/candidates/<sha16>`,
    by the file's content. Its prebuild and its launches may write only here: with one tree
    writable by every launch, a candidate could plant a failure marker, or a library of its own
    making, in the folder another candidate's build is keyed to (keys follow from the sources,
    which it can read). The same file evaluated again, on either path, finds its builds."""
    return Path(root) / "candidates" / content_sha256[:16]


# ---- the lock ---------------------------------------------------------------------------------


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc), '' where unknown: with the pid
    it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_alive(owner: dict[str, Any]) -> bool | None:
    """True/False for an owner on this host; None when it is on another host (cannot tell)."""
    if owner.get("host") != socket.gethostname():
        return None
    pid = int(owner.get("pid") or 0)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = owner.get("start_ticks") or ""
    return not (start and process_start(pid) and process_start(pid) != start)


class BuildLock:
    """Exclusive hold of one build directory.

    flock where the filesystem has it (the kernel releases it when the holder dies, however it
    dies). Where flock is refused (some cluster filesystems), an O_EXCL owner file: broken when
    its owner is dead on this host, or older than `stale_after_s` when the owner is elsewhere.
    """

    def __init__(self, directory: Path, poll_s: float = 0.2, stale_after_s: float = 3600.0) -> None:
        self.path = Path(directory) / LOCK_FILE
        self.poll_s = poll_s
        self.stale_after_s = stale_after_s
        self.fd: int | None = None
        self.exclusive_file = False
        self.waited_s = 0.0
        self.broken: dict[str, Any] | None = None  # the dead owner whose lock was broken

    def owner_record(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "start_ticks": process_start(os.getpid()), "since": time.time()}

    def read_owner(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self, timeout_s: float | None = None) -> None:
        import fcntl

        t0 = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                except OSError as exc:
                    if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                        os.close(fd)
                        self._acquire_exclusive_file(t0, timeout_s)
                        return
                    raise
                self._wait(t0, timeout_s)
        except BaseException:
            if self.fd is None:
                os.close(fd)
            raise
        self.fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.owner_record()).encode(), 0)
        self.waited_s = time.monotonic() - t0

    def _acquire_exclusive_file(self, t0: float, timeout_s: float | None) -> None:
        owner_path = self.path.with_suffix(".owner")
        while True:
            try:
                fd = os.open(owner_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, json.dumps(self.owner_record()).encode())
                self.fd, self.exclusive_file = fd, True
                self.waited_s = time.monotonic() - t0
                return
            except FileExistsError:
                try:
                    owner = json.loads(owner_path.read_text(encoding="utf-8") or "{}")
                    age = time.time() - owner_path.stat().st_mtime
                except (OSError, ValueError):
                    owner, age = {}, 0.0
                alive = owner_alive(owner) if owner else None
                if alive is False or (alive is None and age > self.stale_after_s):
                    self.broken = owner
                    try:
                        owner_path.unlink()
                    except OSError:
                        pass
                    continue
            self._wait(t0, timeout_s)

    def _wait(self, t0: float, timeout_s: float | None) -> None:
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"build lock {self.path} held by {self.read_owner() or 'an unknown owner'} for over {timeout_s:.0f} s")
        time.sleep(self.poll_s)

    def release(self) -> None:
        if self.fd is None:
            return
        if self.exclusive_file:
            os.close(self.fd)
            try:
                self.path.with_suffix(".owner").unlink()
            except OSError:
                pass
        else:
            import fcntl

            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)  # the file stays: unlinking an flocked path races with the next holder
        self.fd = None

    def __enter__(self) -> BuildLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def clear_stale_baton(directory: Path) -> bool:
    """Remove torch's baton from a directory whose BuildLock we hold: nobody else can be building."""
    try:
        (Path(directory) / TORCH_BATON).unlink()
        return True
    except FileNotFoundError:
        return False


# ---- keys and routing ------------------------------------------------------------------------


def _arch_flags(cuda_cflags: Any) -> list[str]:
    """What torch will pass nvcc for the architecture (TORCH_CUDA_ARCH_LIST or the visible GPUs)."""
    try:
        from torch.utils.cpp_extension import _get_cuda_arch_flags

        return list(_get_cuda_arch_flags(list(cuda_cflags or [])))
    except Exception:  # noqa: BLE001 - no CUDA toolkit or GPU: the env var is what there is
        return [f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '')}"]


def toolchain_tag(with_cuda: bool, cuda_cflags: Any = None) -> dict[str, Any]:
    import torch

    tag: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "python": sys.version.split()[0],
        "cxx": os.environ.get("CXX", ""),
    }
    if with_cuda:
        tag["arch"] = _arch_flags(cuda_cflags)
    return tag


def _file_text(path: Any) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def build_key(kind: str, arguments: dict[str, Any]) -> str:
    """`<name>-<hash>`: the name for people, the hash of everything that changes the .so."""
    args = {k: v for k, v in arguments.items() if k not in _NOT_KEYED}
    if kind == "load":
        srcs = args.get("sources")
        srcs = [srcs] if isinstance(srcs, str) else list(srcs or [])
        args["sources"] = [[str(s), _file_text(s)] for s in srcs]
    cuda_sources = args.get("cuda_sources") if kind == "load_inline" else None
    with_cuda = args.get("with_cuda")
    if with_cuda is None:
        with_cuda = bool(cuda_sources) if kind == "load_inline" else any(str(s[0]).endswith((".cu", ".cuh")) for s in args["sources"])
    payload = {"kind": kind, "args": args, "tag": toolchain_tag(bool(with_cuda), args.get("extra_cuda_cflags"))}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=repr).encode()).hexdigest()[:20]
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(arguments.get("name") or "ext"))[:48]
    return f"{name}-{digest}"


def _compile_failure(exc: BaseException) -> bool:
    """A failure of the compiler on the sources (worth remembering), not of the machine."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "Error building extension" not in text:
        return False
    return not any(s in text for s in ("Killed", "killed", "signal", "No space left", "Cannot allocate memory"))


def _routed(kind: str, original: Callable[..., Any], root: Path) -> Callable[..., Any]:
    signature = inspect.signature(original)

    def build(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments.get("build_directory")
        key = build_key(kind, dict(bound.arguments))
        directory = Path(given) if given else root / key
        bound.arguments["build_directory"] = str(directory)
        directory.mkdir(parents=True, exist_ok=True)
        event: dict[str, Any] = {"name": bound.arguments.get("name"), "key": key, "dir": str(directory), "ok": False, "error": ""}
        BUILD_LOG.append(event)
        t0 = time.monotonic()
        lock = BuildLock(directory)
        with lock:
            event["waited_s"] = round(lock.waited_s, 3)
            event["broken_owner"] = lock.broken
            failed = directory / FAILED_FILE
            if failed.is_file():
                stored = json.loads(failed.read_text(encoding="utf-8") or "{}")
                event.update(cached=True, error=stored.get("message", "")[:2000], seconds=round(time.monotonic() - t0, 3))
                raise RuntimeError(stored.get("message") or f"Error building extension '{event['name']}' (stored failure)")
            event["cached"] = any(directory.glob("*.so"))
            event["stale_baton"] = clear_stale_baton(directory)
            try:
                module = original(*bound.args, **bound.kwargs)
            except BaseException as exc:
                event["error"] = f"{type(exc).__name__}: {exc}"[:4000]
                if _compile_failure(exc):
                    tmp = failed.with_suffix(".tmp")
                    tmp.write_text(json.dumps({"message": str(exc), "type": type(exc).__name__, "at": time.time()}), encoding="utf-8")
                    os.replace(tmp, failed)
                raise
            finally:
                event["seconds"] = round(time.monotonic() - t0, 3)
        event["ok"] = True
        return module

    build._pkb_routed = True  # type: ignore[attr-defined]
    build.__wrapped__ = original  # type: ignore[attr-defined]
    return build


def route_builds(root: Path) -> None:
    """Send every load_inline / load of this process to `root/<key>/` under a BuildLock.

    Idempotent. Names already bound to torch's originals elsewhere (`from torch.utils.cpp_extension
    import load_inline` in a module imported earlier) are rebound too.
    """
    import torch.utils.cpp_extension as cpp_extension

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if _ROUTED_ROOT and _ROUTED_ROOT[0] == root:
        return
    _ROUTED_ROOT[:] = [root]
    originals: dict[int, Callable[..., Any]] = {}
    for kind in ("load_inline", "load"):
        current = getattr(cpp_extension, kind)
        original = current
        while getattr(original, "_pkb_routed", False):
            original = original.__wrapped__
        routed = _routed(kind, original, root)
        setattr(cpp_extension, kind, routed)
        originals[id(original)] = routed
        originals[id(current)] = routed
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if name.startswith(("torch", "pkb.eval.build")):
            continue
        for attr in ("load_inline", "load"):
            value = getattr(mod, attr, None) if hasattr(mod, "__dict__") else None
            if value is not None and id(value) in originals and mod.__dict__.get(attr) is value:
                setattr(mod, attr, originals[id(value)])


# ---- prebuild --------------------------------------------------------------------------------

_BUILD_FUNCS = ("compile_cuda_extension", "load_inline")


def lazy_build_calls(tree: ast.Module) -> list[ast.Call]:
    """Calls of compile_cuda_extension / load_inline / cpp_extension.load anywhere in the file."""
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        base = f.value if isinstance(f, ast.Attribute) else None
        if name in _BUILD_FUNCS or (name == "load" and isinstance(base, (ast.Name, ast.Attribute)) and ast.unparse(base).endswith("cpp_extension")):
            calls.append(node)
    return calls


def run_lazy_builds(module: Any, source: str) -> list[str]:
    """Make the build calls found in the source whose arguments are module-level values (a
    `_get_ext()` helper's `compile_cuda_extension("x", CUDA_SRC)`); returns why others were skipped."""
    notes = []
    namespace = dict(vars(module))
    for call in lazy_build_calls(ast.parse(source)):
        where = f"line {call.lineno}"
        try:
            fn = eval(compile(ast.Expression(call.func), "<build call>", "eval"), namespace)  # noqa: S307 - the candidate's own code, in its sandboxed prebuild process
            args = [eval(compile(ast.Expression(a), "<arg>", "eval"), namespace) for a in call.args if not isinstance(a, ast.Starred)]
            kwargs = {k.arg: eval(compile(ast.Expression(k.value), "<arg>", "eval"), namespace) for k in call.keywords if k.arg}
        except Exception as exc:  # noqa: BLE001 - an argument local to the function: built at the first call instead
            notes.append(f"{where}: arguments not module-level ({type(exc).__name__}: {exc})"[:300])
            continue
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            notes.append(f"{where}: *args/**kwargs not evaluated")
            continue
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded in BUILD_LOG by the routed build
            notes.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")
    return notes


@dataclass
class BuildResult:
    ok: bool
    seconds: float
    error: str = ""
    log_path: str = ""
    cached: bool = False  # every build it asked for was already there
    builds: list[dict[str, Any]] = field(default_factory=list)
    import_error: str = ""  # the candidate's import failed (its builds may still have run)
    sandbox: dict[str, Any] = field(default_factory=dict)  # its kind, and what it left running (killed)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BuildOptions:
    root: Path | None = None  # None: build_root()
    extra_sys_path: list[str] = field(default_factory=list)  # what the ranks put on sys.path
    arch_list: str = ""  # TORCH_CUDA_ARCH_LIST for builds without a GPU ('' : leave the env alone)
    python: str | None = None
    hide_gpus: bool = True  # compiling needs no GPU; a candidate's import must not take GPU memory
    repo_root: str = str(Path(__file__).resolve().parents[2])
    max_jobs_per_build: int = 2  # ninja's parallel compiles inside one build (MAX_JOBS)
    # Hidden from the candidate's import in its sandbox (the store, the evaluation's work folder),
    # as for its launches.
    hidden: list[str] = field(default_factory=list)
    # Cores the builds run on (empty: any). A timed launch may run beside the builds on cores of
    # its own (pkb.eval.scheduling), so a compile never takes its CPU.
    cpus: tuple[int, ...] = ()

    @classmethod
    def of(cls, options: Any) -> BuildOptions:
        """BuildOptions as given, or derived from EvalOptions."""
        if isinstance(options, cls):
            return options
        if options is None:
            return cls()
        pkb_root = getattr(options, "pkb_root", None)
        build_dir = getattr(options, "build_dir", None)  # EvalOptions.build_dir, as the eval path reads it
        return cls(
            root=Path(build_dir).resolve() if build_dir else build_root(),
            extra_sys_path=[str(Path(pkb_root).resolve())] if pkb_root else [],
            python=getattr(options, "python", None),
            hidden=hidden_from_builds(options),
        )


def hidden_from_builds(options: Any) -> list[str]:
    """What a build's import must not reach: the run's store and its work folder (other candidates'
    jobs and results), where the options name them."""
    out = []
    for name in ("store_path", "work_dir"):
        value = getattr(options, name, None)
        if value:
            out.append(str(Path(value).resolve()))
    return out


def prebuild(path: Path, options: Any = None, timeout_s: float = 900.0) -> BuildResult:
    """The candidate's builds in a subprocess of its own session (killed whole on timeout).

    The subprocess imports the candidate, so it runs in the same sandbox as a launch
    (pkb.eval.sandbox): its own PID namespace, the tree read-only, the store and work folder
    hidden, writable only its own build folder (candidate_build_root); whatever it leaves running is
    killed and named in the result (`strays`)."""
    from pkb.eval import sandbox as sandboxing
    from pkb.eval.launcher import MARKER_ENV, sweep_strays
    opts = BuildOptions.of(options)
    path = Path(path).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    tag = digest[:16]
    root = candidate_build_root(Path(opts.root or build_root()), digest)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{path.stem[:60]}-{tag}.log"
    result_file = logs / f"{path.stem[:60]}-{tag}.json"
    result_file.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (opts.repo_root, env.get("PYTHONPATH", "")) if p)
    if opts.hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if opts.arch_list and not env.get("TORCH_CUDA_ARCH_LIST"):
        env["TORCH_CUDA_ARCH_LIST"] = opts.arch_list
    env.setdefault("MAX_JOBS", str(max(1, opts.max_jobs_per_build)))
    env.setdefault("OMP_NUM_THREADS", "1")
    scratch = root / "scratch" / tag
    scratch.mkdir(parents=True, exist_ok=True)
    python = opts.python or sys.executable
    cmd = [python, "-m", "pkb.eval.build", str(path), "--root", str(root), "--result", str(result_file)]
    for p in opts.extra_sys_path:
        cmd += ["--sys-path", p]
    marker = os.urandom(8).hex()
    env[MARKER_ENV] = marker  # a double fork that left the session still carries it (sweep_strays)
    box = sandboxing.for_job(
        writable=[str(root), str(scratch)],
        readonly=[opts.repo_root, str(path.parent), *opts.extra_sys_path, *(p for p in env["PYTHONPATH"].split(os.pathsep) if p)],
        hidden=opts.hidden, name=f"build-{tag}",
    )
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(box.wrap(cmd, python, str(scratch)), cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=box.pass_fds,
                                preexec_fn=partial(box.preexec, opts.cpus))
        box.started()
        try:
            while True:  # in short waits, so that Ctrl-C (pkb.eval.interrupt) stops a build at once
                try:
                    proc.wait(timeout=min(INTERRUPT_POLL_S, max(0.0, t0 + timeout_s - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    raise_if_requested()
                    if time.monotonic() - t0 >= timeout_s:
                        _kill_group(proc)
                        timed_out = True
                        break
        except BaseException:
            _kill_group(proc)
            box.finish(proc)
            sweep_strays(marker, {proc.pid})
            raise
    boxed = box.finish(proc)
    strays = [{k: v for k, v in s.items() if k in ("pid", "cmdline", "where")} for s in boxed.get("strays", [])]
    strays += sweep_strays(marker, {proc.pid})
    sandbox_note = {"kind": boxed["kind"], **({"strays": strays} if strays else {})}
    if timed_out:
        return BuildResult(False, time.monotonic() - t0, f"prebuild timed out after {timeout_s:.0f} s", str(log_path), sandbox=sandbox_note)
    seconds = time.monotonic() - t0
    try:
        data = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        return BuildResult(False, seconds, f"prebuild process exited {proc.returncode} without a result: {tail}", str(log_path),
                           sandbox=sandbox_note)
    builds = data.get("builds") or []
    failed = [b for b in builds if not b.get("ok")]
    return BuildResult(
        ok=not failed,
        seconds=seconds,
        error="; ".join(b.get("error", "")[:1000] for b in failed),
        log_path=str(log_path),
        cached=bool(builds) and all(b.get("cached") for b in builds),
        builds=builds,
        import_error=data.get("import_error", ""),
        sandbox=sandbox_note,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=3.0)
            return
        except subprocess.TimeoutExpired:
            continue


def memory_available() -> int:
    """Bytes of memory available now (MemAvailable), or 0 where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pool_size(jobs: int | None, max_jobs_per_build: int = 2, cores: int | None = None, memory: int | None = None) -> int:
    """Builds at a time: one per `max_jobs_per_build` cores (the compiles one build runs at once),
    or `jobs` where given (more than the cores is allowed: the last wave then shares all cores
    instead of leaving some idle), and at most what memory holds at ~3 GB per nvcc."""
    cores = cores or _cores()
    memory = memory_available() if memory is None else memory
    n = jobs if jobs and jobs > 0 else max(1, cores // max(1, max_jobs_per_build))
    if memory:
        n = min(n, max(1, memory // (NVCC_MEMORY_BYTES * max(1, max_jobs_per_build))))
    return max(1, n)


def prebuild_many(paths: Iterable[Path], options: Any = None, jobs: int | None = None, timeout_s: float = 900.0,
                  on_result: Callable[[Path, BuildResult], None] | None = None) -> dict[Path, BuildResult]:
    """Prebuild each distinct file once (by content), `pool_size(jobs)` at a time; `on_result` is
    called for each path as its build lands (in completion order).

    Threads wait on the subprocesses that do the work; one file per distinct content, its result
    shared by every path with that content.
    """
    opts = BuildOptions.of(options)
    unique: dict[str, list[Path]] = {}
    for p in paths:
        p = Path(p)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else f"missing:{p}"
        unique.setdefault(digest, []).append(p)
    cores = len(opts.cpus) or _cores()
    workers = pool_size(jobs, 1, cores)
    # Fewer builds than cores: let each use two compiles at once (main.cpp and the .cu). With
    # more, one compile per build: on the H200 two per build (half as many builds at once) took
    # 65-83 s a build instead of about 85, in twice the waves (24 files: 356 s against 322 s).
    per_build = max(1, min(opts.max_jobs_per_build, cores // max(1, min(workers, len(unique)))))
    opts = BuildOptions(**{**asdict(opts), "max_jobs_per_build": per_build})
    results: dict[Path, BuildResult] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(prebuild, group[0], opts, timeout_s): group for group in unique.values()}
        for fut in as_completed(futures):  # as each lands: its launch may start while others build
            group = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # noqa: BLE001 - a harness problem here is a failed prebuild, never a crash
                res = BuildResult(False, 0.0, f"prebuild failed: {type(exc).__name__}: {exc}")
            for p in group:
                results[p] = res
                if on_result is not None:
                    on_result(p, res)
    return results


# ---- the prebuild process ----------------------------------------------------------------------


def _provide_cuda_helpers(sys_path: list[str]) -> None:
    """`utils.cuda_helpers` as a rank has it, so a build here has the rank's arguments (and key):
    a PKB checkout's own `utils` (the rank imports it for PKB's input factory), else ours."""
    import importlib

    if any((Path(p) / "utils" / "cuda_helpers.py").is_file() for p in sys_path):
        try:
            importlib.import_module("utils")
        except Exception:  # noqa: BLE001 - then the candidate's import says what is wrong
            pass
    try:
        from pkb.eval.shims import provide_for_candidate  # the evaluation's own provider, where present
    except ImportError:
        return
    provide_for_candidate()


def _prebuild_main(argv: list[str]) -> int:
    import argparse
    import importlib.util

    ap = argparse.ArgumentParser(prog="python -m pkb.eval.build")
    ap.add_argument("candidate")
    ap.add_argument("--root", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--sys-path", action="append", default=[])
    args = ap.parse_args(argv)
    for p in reversed(args.sys_path):
        sys.path.insert(0, p)
    _provide_cuda_helpers(args.sys_path)
    route_builds(Path(args.root))
    source = Path(args.candidate).read_text(encoding="utf-8", errors="replace")
    out: dict[str, Any] = {"import_error": "", "notes": []}
    module = None
    try:
        spec = importlib.util.spec_from_file_location("pkb_prebuild_candidate", args.candidate)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the launch reports the import; here only builds count
        out["import_error"] = f"{type(exc).__name__}: {exc}"[:2000]
    if module is not None:
        try:
            out["notes"] = run_lazy_builds(module, source)
        except SyntaxError as exc:
            out["notes"] = [f"not parsed: {exc}"]
    # One entry per key: the last attempt says whether it is built.
    # A module-level build runs twice here (import, then the calls found in the source): one
    # entry per key, ok/error from the last attempt, cached and seconds over all of them.
    by_key: dict[str, dict[str, Any]] = {}
    for event in BUILD_LOG:
        first = by_key.get(event["key"])
        if first is None:
            by_key[event["key"]] = dict(event)
        else:
            first.update(ok=event["ok"], error=event["error"], seconds=round(first.get("seconds", 0) + event.get("seconds", 0), 3))
    out["builds"] = list(by_key.values())
    tmp = Path(args.result + ".tmp")
    tmp.write_text(json.dumps(out, default=str), encoding="utf-8")
    os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(_prebuild_main(sys.argv[1:]))
