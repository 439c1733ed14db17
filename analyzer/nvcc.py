"""nvcc: finding it, running it on a translation unit with a time limit, and reading what it says
(its version, its errors at the candidate's lines, the headers it could not find), plus where
torch's and the toolkit's headers are. Reads the environment (PKB_NVCC, CUDA_HOME, PATH), the
installed torch package's location and the toolkit's include folders; never imports torch.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from analyzer.device_tu import TU_NAME
from pkb.facts import CudaSource

NVCC_FLAGS = [
    "-ptx",
    "-arch=sm_90",
    "-lineinfo",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-w",
]

_MAX_ERROR_LINES = 5


def find_nvcc() -> str | None:
    """$PKB_NVCC, then $CUDA_HOME/bin/nvcc, then nvcc on PATH; None when none is executable."""
    env = os.environ.get("PKB_NVCC")
    if env:
        p = shutil.which(env) if os.sep not in env else env
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    home = os.environ.get("CUDA_HOME")
    if home:
        p = os.path.join(home, "bin", "nvcc")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which("nvcc")


_VERSION_CACHE: dict[tuple, str] = {}


def nvcc_version(nvcc: str) -> str:
    """`nvcc --version` text, remembered per (path, mtime, size) so repeated calls run nothing."""
    try:
        st = os.stat(nvcc)
        key = (os.path.realpath(nvcc), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (nvcc, 0, 0)
    if key in _VERSION_CACHE:
        return _VERSION_CACHE[key]
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout or "") + (out.stderr or "")
        lines = [ln.strip() for ln in text.splitlines() if "release" in ln or ln.startswith("Build")]
        version = " | ".join(lines) or text.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    _VERSION_CACHE[key] = version
    return version


@dataclass
class NvccRun:
    ok: bool
    ptx: str
    output: str
    seconds: float
    timed_out: bool = False
    oserror: str = ""


def run_nvcc(nvcc: str, tu_text: str, flags: list[str], timeout_s: float) -> NvccRun:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pkb-ptx-") as tmp:
        cu = Path(tmp) / "pkb_tu.cu"
        out = Path(tmp) / "pkb_tu.ptx"
        cu.write_text(tu_text)
        cmd = [nvcc, *flags, str(cu), "-o", str(out)]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        except OSError as e:
            return NvccRun(False, "", "", time.monotonic() - t0, oserror=str(e))
        try:
            output, _ = proc.communicate(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # nvcc's own children (cudafe++, cicc) too
            except OSError:
                proc.kill()
            output, _ = proc.communicate()
            return NvccRun(False, "", output or "", time.monotonic() - t0, timed_out=True)
        ptx = out.read_text(errors="replace") if proc.returncode == 0 and out.exists() else ""
        return NvccRun(proc.returncode == 0 and bool(ptx), ptx, output or "", time.monotonic() - t0)


# nvcc's front end: "file(LINE): error: msg"; its preprocessor (gcc's): "file:LINE:COL: fatal error: msg"
_ERR_RE = re.compile(
    r"^(?P<file>[^\n():]*?)(?:\((?P<line>\d+)\)|:(?P<line2>\d+):\d+): (?P<sev>error|catastrophic error|fatal error)[^:\n]*: (?P<msg>.*)$",
    re.M,
)
_AT_LINE_RE = re.compile(r"at line (\d+)(?! of)")


def error_lines(output: str, src: CudaSource, file: str, appended_from: int | None) -> list[str]:
    msgs: list[str] = []
    for m in _ERR_RE.finditer(output):
        fname, msg = m.group("file"), m.group("msg").strip()
        line = int(m.group("line") or m.group("line2"))
        if os.path.basename(fname) == TU_NAME:
            if appended_from is not None and line >= appended_from:
                msgs.append(f"{file}: error (in a generated template instantiation): {msg}")
            else:
                msgs.append(f"{file}:{src.file_line(line)}: error: {msg}")
        else:
            msgs.append(f"{fname}({line}): error: {msg}")
        if len(msgs) >= _MAX_ERROR_LINES:
            break
    if not msgs:
        other = [ln.strip() for ln in output.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()]
        msgs = other[:_MAX_ERROR_LINES] or [ln.strip() for ln in output.strip().splitlines()[:_MAX_ERROR_LINES]]
    return msgs


def missing_headers(output: str) -> list[str]:
    names = re.findall(r"(?:fatal error: |cannot open source file \")([^\s\"]+?)(?:: No such file or directory|\")", output)
    return sorted(set(names))


def implicated_appended(output: str, appended_from: int) -> set[int]:
    """Appended (instantiation) lines that nvcc's errors point at, directly or via 'at line N'."""
    lines: set[int] = set()
    for m in _ERR_RE.finditer(output):
        line = int(m.group("line") or m.group("line2"))
        if os.path.basename(m.group("file")) == TU_NAME and line >= appended_from:
            lines.add(line)
    for m in _AT_LINE_RE.finditer(output):
        if int(m.group(1)) >= appended_from:
            lines.add(int(m.group(1)))
    return lines


@functools.lru_cache(maxsize=1)
def torch_includes() -> tuple[list[str], list[str]]:
    """(include dirs, defines) for compiling a torch extension source; empty when torch is absent.

    Found from torch's package location without importing torch: this runs in nvcc worker
    threads, and an import there compiles modules concurrently with the main thread's ast work,
    which CPython 3.11 does not survive ("AST constructor recursion depth mismatch").
    """
    import importlib.util

    incs: list[str] = []
    defs: list[str] = []
    try:
        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            root = Path(spec.origin).parent / "include"
            if root.is_dir():
                incs = [str(root), str(root / "torch" / "csrc" / "api" / "include")]
    except Exception:  # noqa: BLE001
        incs = []
    if not incs:
        return [], []
    try:
        py = sysconfig.get_paths().get("include")
        if py and os.path.isdir(py):
            incs.append(py)
    except Exception:  # noqa: BLE001
        pass
    defs += ["-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=pkb_ptx_ext"]
    return incs, defs


def torch_version() -> str:
    """torch's installed version (the full-source retry depends on its headers), without importing it."""
    try:
        from importlib.metadata import version

        return "torch " + version("torch")
    except Exception:  # noqa: BLE001
        return "no torch"


@functools.lru_cache(maxsize=8)
def cuda_include_dirs(nvcc: str | None) -> tuple[str, ...]:
    """Where nvcc finds the toolkit's headers (following a shell wrapper's `exec .../bin/nvcc`)."""
    roots = []
    for p in filter(None, [nvcc, os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
        real = os.path.realpath(p)
        if os.path.isfile(real) and os.path.getsize(real) < 4096:
            try:
                m = re.search(r"exec\s+\"?(\S+?)/bin/nvcc", Path(real).read_text(errors="replace"))
            except OSError:
                m = None
            if m:
                roots.append(m.group(1))
        roots.append(os.path.dirname(os.path.dirname(real)) if real.endswith("/bin/nvcc") else real)
    dirs = []
    for r in roots:
        for d in (os.path.join(r, "include"), os.path.join(r, "include", "cccl")):
            if os.path.isdir(d) and d not in dirs:
                dirs.append(d)
    return tuple(dirs)
