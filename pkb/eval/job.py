"""One launch's instructions and the names of the files its ranks write in the job directory.

The launcher writes `job.json`; every rank reads it. Ranks report only through files here
(status, result, verdict), never through collectives, so a broken rank cannot take the
others' results down.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobSpec:
    job_dir: str
    candidate_path: str  # the file imported by every rank (a copy of the evaluated bytes)
    candidate_sha256: str
    # {"kind": "registry", "id": 1} | {"kind": "file", "id": 1, "path": ...}
    # | {"kind": "pkb", "id": 1, "root": ..., "stem": "1_allreduce", "shape": [1024, 1024]}
    problem: dict[str, Any]
    world_size: int
    backend: str  # nccl | gloo
    device: str  # cuda | cpu
    dtype: str
    trials: int
    tolerance: tuple[float, float] | None = None  # None: the problem's own for the dtype
    scale: str = "small"
    warmup: int = 500
    iters: int = 100
    groups: int | None = None
    timeout_s: float = 600.0
    extensions_dir: str = ""
    build_root: str = ""  # pkb.eval.build: the ranks route load_inline/load there ('' : torch's own)
    save_cap_bytes: int = 8 * 1024 * 1024
    # per output, for the harness's own comparison (pkb.eval.judge); 0: the default (128 MiB)
    judge_cap_bytes: int = 0
    repo_root: str = ""
    extra_sys_path: list[str] = field(default_factory=list)
    visible_devices: str = ""  # CUDA_VISIBLE_DEVICES for this launch ('' leaves it alone)
    cpus: list[int] = field(default_factory=list)  # cores its processes run on ([]: any)
    # Per-phase limits (the whole job has timeout_s): the candidate's import, one JIT build, and
    # one call of the candidate or the reference. A rank past one is killed by the launcher.
    import_timeout_s: float = 300.0
    compile_timeout_s: float = 900.0
    call_timeout_s: float = 120.0
    # From the evaluating process: does the source build or use CUDA code (claims custom
    # kernels), and the static exploit flags of pkb.eval.static_checks.
    profile: bool = False  # a few candidate calls under torch.profiler after timing
    profile_backend: str = ""  # kineto | cupti | nvtx (ranges only); '' : $PKB_PROFILE_BACKEND or kineto
    # argv every rank's python runs under (an ncu command line: ncu ... python, per rank)
    rank_wrapper: list[str] = field(default_factory=list)
    claims_custom_kernels: bool = False
    # Paths the candidate's sandbox hides (the store, the evaluation's work folder).
    sandbox_hide: list[str] = field(default_factory=list)
    static_flags: list[dict[str, Any]] = field(default_factory=list)
    # A probe of the reference alone (no candidate is loaded): does it run at this world size?
    reference_only: bool = False
    # A screen that times only when the harness opens its gate (pkb.eval.timing_gate).
    timing_gate: bool = False

    @property
    def timing(self) -> bool:
        return self.iters > 0

    def write(self) -> Path:
        path = Path(self.job_dir) / "job.json"
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("tolerance") is not None:
            data["tolerance"] = tuple(data["tolerance"])
        return cls(**data)


def status_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"status_rank{rank}.json"


def result_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"result_rank{rank}.json"


def verdict_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"verdict_rank{rank}.json"


def log_paths(job_dir: str | Path, rank: int) -> tuple[Path, Path]:
    return Path(job_dir) / f"rank{rank}.stdout", Path(job_dir) / f"rank{rank}.stderr"


# A rank's stdout or stderr past this is cut to its last quarter while the launch runs: a
# candidate printing without end must not fill the disk under the store.
LOG_CAP_BYTES = 16 << 20


def cap_log(path: str | Path, cap: int = LOG_CAP_BYTES) -> int:
    """Cuts a log past `cap` bytes to a line saying how much went and its last quarter; returns
    the bytes dropped. The rank appends (O_APPEND), so its next write lands after the tail. Only
    a plain file with one link is cut: the job folder is the candidate's to write, and a link it
    put in the log's place must not make the harness truncate what the link points at."""
    import stat

    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size <= cap:
            return 0
        keep = cap // 4
        tail = os.pread(fd, keep, st.st_size - keep)
        os.ftruncate(fd, 0)
        dropped = st.st_size - len(tail)
        os.pwrite(fd, f"[{dropped} bytes of this log dropped: past its {cap} byte cap]\n".encode() + tail, 0)
        return dropped
    except OSError:
        return 0
    finally:
        os.close(fd)


def launcher_log_path(job_dir: str | Path) -> Path:
    return Path(job_dir) / "torchrun.log"


def tensors_dir(job_dir: str | Path) -> Path:
    return Path(job_dir) / "tensors"


def key_path(job_dir: str | Path, rank: int) -> Path:
    """The job's secret for one rank: read and deleted by the rank before any candidate code runs."""
    return Path(job_dir) / f".key_rank{rank}"


# Files the harness itself writes in a job directory (anything else there came from elsewhere).
HARNESS_FILE_PATTERNS = (
    "job.json", "status_rank*.json", "result_rank*.json", "verdict_rank*.json", "rank*.stdout",
    "rank*.stderr", "torchrun.log", "torchelastic_error.json", "tensors", "scratch", ".key_rank*",
    ".*.tmp", "outputs", ".judge_rank*", "timing_gate",
)

MAC_FIELD = "mac"


def _mac(data: dict[str, Any], key: str) -> str:
    body = {k: v for k, v in data.items() if k != MAC_FIELD}
    blob = json.dumps(body, sort_keys=True, default=_json_default).encode()
    return hmac.new(key.encode(), blob, hashlib.sha256).hexdigest()


def signed(data: dict[str, Any], key: str | None) -> dict[str, Any]:
    """`data` with an HMAC of its content under the job's key (no key: unchanged).

    Candidate code runs as the same user as the harness and can write any file of the job; it
    cannot sign one without the key, which exists only in the launcher and in the ranks' memory.
    """
    if not key:
        return data
    # round trip first, so the MAC is over exactly what a reader will parse
    plain = json.loads(json.dumps({k: v for k, v in data.items() if k != MAC_FIELD}, default=_json_default))
    plain[MAC_FIELD] = _mac(plain, key)
    return plain


def verify(data: dict[str, Any] | None, key: str | None) -> bool:
    if data is None:
        return False
    if not key:
        return True
    mac = data.get(MAC_FIELD)
    return isinstance(mac, str) and hmac.compare_digest(mac, _mac(data, key))


@contextmanager
def harness_umask() -> Iterator[None]:
    """The rank's own files and folders are made with umask 022 whatever the candidate set (a
    umask of 777 gave folders no one may enter: without CAP_DAC_OVERRIDE, as in the sandbox,
    not even their owner could then save an output there)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def write_json_atomic(path: Path, data: Any) -> None:
    """Readers never see half a file: write beside it, then rename over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with harness_umask():
        tmp.write_text(json.dumps(data, default=_json_default), encoding="utf-8")
    os.replace(tmp, path)


# The most the harness reads of one file the job folder holds (a status or result file).
READ_CAP_BYTES = 128 * 1024 * 1024


def read_plain(path: str | Path, tail: int | None = None, cap: int = READ_CAP_BYTES) -> bytes:
    """A file of the job folder, read only where it is a plain file (OSError otherwise): the
    candidate can put a FIFO there, whose open would block the harness until someone writes, or a
    link to anything. `tail`: its last bytes only; past `cap` bytes, OSError."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a plain file")
        start = max(0, st.st_size - tail) if tail is not None else 0
        if st.st_size - start > cap:
            raise OSError(f"{path}: {st.st_size} bytes, past the {cap} byte cap")
        chunks, at = [], start
        while True:
            chunk = os.pread(fd, 1 << 20, at)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            at += len(chunk)
            if at - start > cap:
                raise OSError(f"{path}: grew past the {cap} byte cap while read")
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(read_plain(path).decode("utf-8"))
    except (OSError, ValueError):
        return None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)
